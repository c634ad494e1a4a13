"""The reported agents of Tables 3 and 4: loop rewards and the expert reward retrained with validation."""

from types import SimpleNamespace

import pytest

from llmtraffic.bus import scenarios
from llmtraffic.bus.reward_design.candidates import expert_code
from llmtraffic.bus.reward_design.jobs import DesignRun, ReferenceRun
from llmtraffic.bus.reward_design.validated import EXPERT, validated_frame
from llmtraffic.bus.training import OBS_SCALE

DQN = dict(hidden=(16,), episodes=2, eps_decay_episodes=1, updates_per_episode=5, batch_size=16, learning_starts=16,
           obs_scale=OBS_SCALE)
CODE = expert_code(scenarios.case1().state_dim).replace("return", "return 0.5 *", 1)  # another reward than the expert's


def _inputs():
    run = DesignRun("search designer", "paradigm", 0, outcome=SimpleNamespace(final_code=CODE, ok=True), final_code=CODE)
    gone = DesignRun("LLM designer", "paradigm", 0, unavailable="needs an LLM backend")
    ref = ReferenceRun(0, [{"method": "no holding", "seed": 5, "travel_time_s": 7.0},
                           {"method": EXPERT, "seed": 5, "travel_time_s": -1.0}], {})  # -1: the unvalidated agent
    return {run.label: [run], gone.label: [gone]}, [ref]


def test_every_reported_agent_is_a_validated_retraining_and_fixed_references_stay():
    runs, refs = _inputs()
    label = next(iter(runs))  # the search designer's row; the LLM row has no run
    frame = validated_frame(runs, refs, dqn=DQN, val_seeds=[200], eval_seeds=[5, 6], design_seeds=[100],
                            horizon_s=1800.0, train_horizon_s=1800.0)
    by = frame.groupby("method")
    assert sorted(by.groups) == sorted(["no holding", EXPERT, label])  # nothing for the unavailable
    assert by.get_group("no holding")["travel_time_s"].tolist() == [7.0]
    # a fixed reference's runs are its eval seeds, not copies per agent seed (issue 35)
    assert by.get_group("no holding")["agent_seed"].isna().all() and set(by.get_group("no holding")["noun"]) == {"eval seed"}
    assert set(by.get_group(label)["noun"]) == {"design run"} and set(by.get_group(EXPERT)["noun"]) == {"agent"}
    for method in (EXPERT, label):
        mine = by.get_group(method)
        assert sorted(mine["seed"]) == [5, 6] and set(mine["agent_seed"]) == {0}
        assert (mine["travel_time_s"] > 0).all() and set(mine["selected"]) <= {1, 2}
    with pytest.raises(ValueError, match=r"val_seeds overlap eval_seeds at \[5\]"):
        validated_frame(runs, refs, dqn=DQN, val_seeds=[5], eval_seeds=[5, 6], design_seeds=[100],
                        horizon_s=1800.0, train_horizon_s=1800.0)


def test_fixed_references_appear_once_per_eval_seed_however_many_reference_runs():
    from llmtraffic.bus.reward_design.tables import reference_rows

    refs = [ReferenceRun(a, [{"method": "no holding", "seed": 5, "travel_time_s": 7.0},
                             {"method": EXPERT, "seed": 5, "travel_time_s": 3.0 + a}], {}) for a in (0, 1, 2)]
    rows = reference_rows(refs)
    assert [(r["method"], r["agent_seed"]) for r in rows if r["method"] == EXPERT] == [(EXPERT, 0), (EXPERT, 1), (EXPERT, 2)]
    fixed = [r for r in rows if r["method"] == "no holding"]
    assert len(fixed) == 1 and fixed[0]["agent_seed"] != fixed[0]["agent_seed"]  # NaN: no agent seed
    assert [r["method"] for r in reference_rows(refs, learned=False)] == ["no holding"]
