"""The surrogate-tiny stand-in: compact prompt, noisy heuristic, supervised start, round trip."""

import pickle

import numpy as np
import pytest
import torch

from llmtraffic.rl.llm_ppo import torch_threads
from llmtraffic.signal.state import IntersectionState, LaneCounts, Movement, Phase
from llmtraffic.signal.surrogate import (
    LABEL,
    SurrogateConfig,
    compact_prompt,
    load_surrogate,
    max_queue_phase,
    noisy_heuristic,
    phase_queue,
    surrogate_ppo_config,
    train_surrogate,
)

PHASES = (
    Phase(0, "NS", "north-south", (Movement("n", "s_out", "N", "through"), Movement("s", "n_out", "S", "through"),
                                   Movement("s", "e_out", "S", "right"))),
    Phase(1, "EW", "east-west", (Movement("e", "w_out", "E", "through"), Movement("w", "e_out", "W", "through"))),
)
STATE = IntersectionState(
    30.0, 1,
    {"n": LaneCounts(2, 1, 0, 3), "s": LaneCounts(4, 0, 1, 0), "e": LaneCounts(5, 0, 0, 0), "w": LaneCounts(0, 2, 2, 2)},
    PHASES,
)


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    with torch_threads(1):
        yield


def test_compact_prompt_sums_each_lane_once():
    assert compact_prompt(STATE) == "now EW ; NS q6 n1 m1 f3 ; EW q5 n2 m2 f2 =>"
    assert phase_queue(STATE, PHASES[0]) == 6  # lane s serves two movements, counted once
    assert max_queue_phase(STATE) == 0


def test_noisy_heuristic_mixes_max_queue_and_uniform():
    rng = np.random.default_rng(0)
    always = {noisy_heuristic(STATE, 1.0, rng) for _ in range(50)}
    assert always == {0}
    picks = np.array([noisy_heuristic(STATE, 0.4, rng) for _ in range(4000)])
    # P(max-queue phase) = 0.4 + 0.6 / 2 = 0.7
    assert (picks == 0).mean() == pytest.approx(0.7, abs=0.03)


def test_config_rejects_bad_values():
    with pytest.raises(ValueError, match="p_heuristic"):
        SurrogateConfig(p_heuristic=1.5)
    with pytest.raises(ValueError, match="collect_seeds"):
        SurrogateConfig(collect_seeds=())


def test_short_supervised_start_learns_the_answer_format_and_round_trips():
    cfg = SurrogateConfig(scenario="cologne1", collect_seeds=(1000,), episode_s=600, steps=60, hidden=64)
    artifact = pickle.loads(pickle.dumps(train_surrogate(cfg)))
    assert artifact.label == LABEL == "surrogate-tiny"
    model, tok = load_surrogate(artifact)
    again, _ = load_surrogate(artifact)
    prompt = "now NULSUL ; NUTRLSUTRL q3 n0 m1 f0 ; NULSUL q0 n0 m0 f0 ; EUTRLWUTRL q7 n1 m0 f2 ; EULWUL q1 n0 m0 f0 =>"
    ids = tok(prompt, return_tensors="pt", add_special_tokens=False).input_ids
    with torch.no_grad():
        assert torch.equal(model(input_ids=ids).logits, again(input_ids=ids).logits)
        out = model.generate(input_ids=ids, max_new_tokens=12, do_sample=False, pad_token_id=tok.pad_token_id,
                             eos_token_id=tok.eos_token_id)
    answer = tok.decode(out[0, ids.shape[1]:], skip_special_tokens=True)
    assert answer in {f"<signal> {m}</signal>" for m in ("NUTRLSUTRL", "NULSUL", "EUTRLWUTRL", "EULWUL")}
    assert len(tok(answer, add_special_tokens=False).input_ids) == 3  # tag, mnemonic, tag: the phase is one token
    assert out[0, -1] == tok.eos_token_id
    assert tok.convert_ids_to_tokens(out[0, ids.shape[1]].item()) == "<signal>"  # one whole-tag token


def test_surrogate_ppo_config_overrides():
    cfg = surrogate_ppo_config(actor_lr=1e-4)
    assert (cfg.actor_lr, cfg.top_p, cfg.max_new_tokens) == (1e-4, 0.95, 12)
