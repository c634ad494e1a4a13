"""OracleTSC training loop (Alg. 1 schedule): resume after a crash, best-checkpoint selection,
and the learning test against the random-reward control."""

import json
import math
from statistics import median

import pytest
import torch

from llmtraffic.rl.llm_ppo import LMPolicy, torch_threads
from llmtraffic.llm.tiny import tiny_tokenizer
from llmtraffic.signal import evaluate
from llmtraffic.signal.oracle import RewardConfig
from llmtraffic.signal.oracle_training import (LLMController, OracleConfig, chat_prompter, decide, evaluate_policy,
                                               retain, select_best, train, train_together)
from llmtraffic.signal.llm_jobs import answer_agreement
from llmtraffic.signal.state import IntersectionState, LaneCounts, Movement, Phase
from llmtraffic.signal.surrogate import SurrogateConfig, compact_prompt, load_surrogate, surrogate_ppo_config, train_surrogate


def prompter(state, history):
    return compact_prompt(state)


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    with torch_threads(1):
        yield


@pytest.fixture(scope="module")
def raw_surrogate():
    """An unsupervised (steps = 0) surrogate: enough to exercise the schedule quickly."""
    return train_surrogate(SurrogateConfig(collect_seeds=(1000,), episode_s=300, steps=0, hidden=32))


class Killed(Exception):
    pass


class ScriptedPolicy:
    """Stands in for LMPolicy.sample with fixed answers, to check the controller's bookkeeping."""

    def __init__(self, answers):
        self.answers, self.calls = list(answers), []

    def sample(self, prompt, group_size=None, rng=None, record=True, choices=None):
        self.calls.append((prompt, group_size, record))
        return [self.answers[(len(self.calls) - 1) % len(self.answers)]], None


def test_controller_applies_algorithm_2_keeps_phase_on_invalid_and_passes_two_past_exchanges():
    script = ["<signal>EULWUL</signal>", "no idea", "Northern and southern U-turn and left-turn lanes", "<signal>x</signal>"]
    policy = ScriptedPolicy(script)
    seen = []

    def spy_prompter(state, history):
        seen.append((state.phase, [a for _, a in history]))
        return "p"

    controller = LLMController(policy, spy_prompter)
    evaluate("cologne1", controller, seed=3, episode_s=80)  # 8 decisions
    # phases: EULWUL = 3, invalid keeps 3, NULSUL = 1 (by description), invalid keeps 1
    assert [phase for phase, _ in seen] == [0, 3, 3, 1, 1, 3, 3, 1]
    assert [h for _, h in seen][:4] == [[], [3], [3, 3], [3, 1]]
    assert (controller.decisions, controller.invalid) == (8, 4)
    assert all(call == ("p", 1, False) for call in policy.calls)  # G = 1, never recorded for training


class GroupPolicy:
    """Stands in for LMPolicy.sample: a fixed group of G answers."""

    def __init__(self, texts):
        self.texts = texts

    def sample(self, prompt, group_size=None, rng=None, record=True, choices=None):
        return list(self.texts), None


def test_entropy_reward_clusters_answers_by_phase_not_by_text():
    ns = Phase(0, "NTST", "Northern and southern through lanes", (Movement("n", "s", "N", "through"),))
    ew = Phase(1, "ETWT", "Eastern and western through lanes", (Movement("e", "w", "E", "through"),))
    state = IntersectionState(10.0, 1, {"n": LaneCounts(4, 0, 0, 0), "e": LaneCounts(1, 0, 0, 0)}, (ns, ew))
    # four texts, all different: token-level clusters would be four singletons (entropy ln 4);
    # three name NTST (mnemonic, lower case, description), one names ETWT
    texts = ["<signal> NTST</signal>", "<signal>ntst</signal>", "Serve northern and southern through lanes.",
             "<signal>ETWT</signal>"]
    action, valid, counts, _ = decide(GroupPolicy(texts), lambda s, h: "p", state, [])
    assert (action, valid, counts.tolist()) == (0, True, [3, 1])
    agreement = answer_agreement([0, 0, 0, 1], texts)
    assert agreement["entropy"] == pytest.approx(-(0.75 * math.log(0.75) + 0.25 * math.log(0.25)))
    assert agreement["text_entropy"] == pytest.approx(math.log(4))
    assert agreement["rewordings"] == 2  # NTST in three wordings, ETWT in one
    assert answer_agreement([1, 1, None], ["<signal>ETWT</signal>", " <signal>ETWT</signal>", "x"])["rewordings"] == 0
    after = IntersectionState(20.0, 0, {"n": LaneCounts(1, 0, 0, 0), "e": LaneCounts(1, 0, 0, 0)}, (ns, ew))
    naive = RewardConfig(entropy="naive")(state, action, after, counts)
    assert naive == pytest.approx(3 + 0.75)  # R_env = 5 - 2 queued, r_E = 3/4 (by text it would be 1/4)
    assert RewardConfig(entropy="softmax", tau=0)(state, action, after, counts) == pytest.approx(3 + 1)


@pytest.mark.parametrize("reward, drawn", [({}, [1]), ({"hurdle": 2.0}, [1]), ({"entropy": "softmax"}, [4]),
                                           ({"entropy": "naive"}, [4])])
def test_training_draws_g_answers_only_for_a_reward_that_reads_them(raw_surrogate, tmp_path, reward, drawn):
    model, tok = load_surrogate(raw_surrogate)
    policy = LMPolicy(model, tok, surrogate_ppo_config(group_size=4))
    sizes = []
    sample = policy.sample
    policy.sample = lambda prompt, group_size=None, **kw: sizes.append(group_size or 4) or sample(prompt, group_size, **kw)
    train(policy, prompter, OracleConfig(episodes=1, episode_s=360, reward=reward), tmp_path)
    assert len(sizes) == 36 and sorted(set(sizes)) == drawn


@pytest.mark.parametrize("scenario", ["cologne1", "hangzhou1x1"])  # SUMO in processes; CityFlow engines side by side
def test_seeds_evaluated_together_get_the_numbers_each_gets_alone(raw_surrogate, scenario):
    model, tok = load_surrogate(raw_surrogate)
    policy = LMPolicy(model, tok, surrogate_ppo_config())
    seeds = [4, 9, 4]
    together = evaluate_policy(policy, prompter, scenario, seeds, episode_s=150)
    alone = []
    for seed in seeds:
        controller = LLMController(policy, prompter)
        alone.append({**evaluate(scenario, controller, seed=seed, episode_s=150), "answers": controller.traces})
    keys = ("queue", "travel_time_s", "throughput", "queue_series", "controller", "seed", "simulator_version")
    for ours, ref in zip(together, alone):
        assert {k: ours[k] for k in keys} == {k: ref[k] for k in keys}
    assert together[0]["queue_series"] == together[2]["queue_series"]
    if scenario == "cologne1":  # SUMO's seed draws the demand; CityFlow's flows are fixed
        assert together[0]["queue_series"] != together[1]["queue_series"]
    assert len({len(a) for _, a in alone[0]["answers"]}) > 1  # answers of different lengths were batched


def test_chat_prompter_uses_the_chat_template_with_a4_system_prompt():
    tok = tiny_tokenizer(["<signal>NTST</signal>"] * 3)
    phase = Phase(0, "NTST", "Northern and southern through lanes", (Movement("n", "s", "N", "through"),))
    state = IntersectionState(120.0, 0, {"n": LaneCounts(4, 0, 1, 2)}, (phase,))
    text = chat_prompter(tok)(state, [])
    assert text.startswith("<|im_start|>system\nYou are an expert in traffic management.")
    assert "<|im_start|>user\n## Current state (t = 120 s)\nCurrent phase: NTST\n\nPhase: NTST" in text
    assert text.endswith("<|im_end|>\n<|im_start|>assistant\n")


def test_config_validation():
    with pytest.raises(ValueError, match="checkpoint_every_s must be a multiple"):
        OracleConfig(update_every_s=360, checkpoint_every_s=500)
    with pytest.raises(ValueError, match="OracleConfig.episodes"):
        OracleConfig(episodes=0)
    assert OracleConfig(reward={"hurdle": 2.7, "entropy": "softmax"}).reward.hurdle == 2.7


def test_killed_run_resumes_from_its_last_checkpoint_and_best_is_selected(raw_surrogate, tmp_path):
    cfg = OracleConfig(episodes=2, episode_s=720, update_every_s=360, checkpoint_every_s=360)

    def fresh():
        model, tok = load_surrogate(raw_surrogate)
        return LMPolicy(model, tok, surrogate_ppo_config(group_size=2))

    dying = fresh()
    update = dying.update

    def update_then_die(buffer):
        if dying.updates == 1:  # the second update (ep 0, t = 720 s) never happens
            raise Killed
        return update(buffer)

    dying.update = update_then_die
    with pytest.raises(Killed):
        train(dying, prompter, cfg, tmp_path)
    progress = json.loads((tmp_path / "progress.json").read_text())
    assert progress["checkpoints"] == ["ep0_t00360.pt"] and progress["episodes"] == []

    resumed = fresh()
    result = train(resumed, prompter, cfg, tmp_path)
    # 1 update kept from the checkpoint, then episode 0 replayed (2) and episode 1 (2)
    assert resumed.updates == 5
    assert [e["episode"] for e in result["episodes"]] == [0, 1]
    assert [p.name for p in result["checkpoints"]] == ["ep0_t00360.pt", "ep0_t00720.pt", "ep1_t00360.pt", "ep1_t00720.pt"]
    assert all(e["updates"] == 2 for e in result["episodes"])

    with pytest.raises(ValueError, match="different OracleConfig"):
        train(fresh(), prompter, OracleConfig(episodes=3, episode_s=720, update_every_s=360, checkpoint_every_s=360), tmp_path)

    best, rows = select_best(resumed, prompter, result["checkpoints"], "cologne1", seed=7, episode_s=300)
    assert len(rows) == 4
    best_row = min(rows, key=lambda r: (r["deadlock"], r["queue"]))
    assert best.name == best_row["checkpoint"]
    assert resumed.updates == torch.load(best, weights_only=False)["updates"]
    # the four checkpoints were played together, each as it plays alone
    alone = []
    for path in result["checkpoints"]:
        resumed.load(path)
        alone.append(evaluate("cologne1", LLMController(resumed, prompter), seed=7, episode_s=300)["queue"])
    assert [r["queue"] for r in rows] == alone and len(set(alone)) > 1

    # retention: the selection of every checkpoint recorded, then all but the best and the last deleted
    gone = retain(tmp_path, best, rows)
    kept = sorted(p.name for p in tmp_path.glob("*.pt"))
    assert kept == sorted({best.name, "ep1_t00720.pt"}) and len(gone) == 4 - len(kept)
    progress = json.loads((tmp_path / "progress.json").read_text())
    assert progress["selection"] == json.loads(json.dumps(rows)) and progress["best"] == best.name
    again = fresh()  # a run interrupted after its selection resumes from the last checkpoint, with the record
    finished = train(again, prompter, cfg, tmp_path)
    assert again.updates == 5 and finished["best"] == best and finished["selection"] == progress["selection"]


def test_a_training_run_is_reproducible_whatever_ran_before_it(raw_surrogate, tmp_path):
    """Cologne1 (SUMO): the same seeds give the same training episodes and adapters, with other
    SUMO episodes before and between the two runs (a later libsumo start in one process is not
    bit-reproducible; training episodes run in fresh processes, as evaluation ones do)."""
    cfg = OracleConfig(episodes=2, episode_s=1200, update_every_s=600, checkpoint_every_s=1200)

    def run(folder):
        model, tok = load_surrogate(raw_surrogate)
        policy = LMPolicy(model, tok, surrogate_ppo_config(group_size=2))
        result = train(policy, prompter, cfg, tmp_path / folder)
        return [e["queue"] for e in result["episodes"]], torch.load(result["checkpoints"][-1], weights_only=False)

    def disturb(seed):  # an in-process SUMO episode with many phase changes
        from llmtraffic.signal import SignalEnv
        with SignalEnv("cologne1", seed=seed) as env:
            env.reset(seed=seed)
            for k in range(120):
                env.step(k % len(env.phases))

    disturb(1)
    first, state = run("a")
    disturb(2)
    second, again = run("b")
    assert first == second
    assert all(torch.equal(state["adapters"][k], again["adapters"][k]) for k in state["adapters"])


@pytest.mark.slow
def test_two_ppo_episodes_cut_held_out_queue_and_random_reward_does_not(tmp_path):
    """Issue 7 acceptance: surrogate on Cologne1, 2 episodes of 360 decisions with G = 8."""
    artifact = train_surrogate(SurrogateConfig(scenario="cologne1"))
    seeds = [100, 101, 102]

    def fresh(ppo_seed: int = 0):
        model, tok = load_surrogate(artifact)
        return LMPolicy(model, tok, surrogate_ppo_config(seed=ppo_seed))

    def queues(policy):
        rows = evaluate_policy(policy, prompter, "cologne1", seeds)
        return [r["queue"] for r in rows], [r["invalid_rate"] for r in rows]

    start, start_invalid = queues(fresh())
    after, after_invalid, control_after = [], [], []
    for ppo_seed in (0, 1):  # two training runs each: one run is an anecdote (training is deterministic now)
        trained = fresh(ppo_seed)
        train(trained, prompter, OracleConfig(scenario="cologne1", episodes=2), tmp_path / f"real{ppo_seed}")
        q, invalid = queues(trained)
        after, after_invalid = after + q, after_invalid + invalid
        control = fresh(ppo_seed)
        train(control, prompter, OracleConfig(scenario="cologne1", episodes=2, random_reward_std=3.0, seed=ppo_seed),
              tmp_path / f"control{ppo_seed}")
        control_after += queues(control)[0]
    print(f"median queue: start {median(start):.2f}, trained {median(after):.2f}, control {median(control_after):.2f}; "
          f"invalid start {max(start_invalid):.3f} trained {after_invalid}")
    assert median(after) <= 0.7 * median(start), (start, after)
    # Pooled over runs and held-out episodes. With the multi-form surrogate (tag, lower-case tag, sentence)
    # the trained policy's invalid share varied from run to run while SUMO training episodes shared one
    # process (start: 0 %): 0 %, 1 %, 10.6 %, 21.8 % and 41.1 % in five runs of this test (PPO seed 0). PPO
    # sometimes splices two forms ("<signal> NULSULutrlsutrl</signal>"). A collapse into unreadable answers
    # (the failure this guards against) is far above this bar.
    assert sum(after_invalid) / len(after_invalid) < 0.3, after_invalid
    # The gain comes from the reward: the typical reward-trained run beats every random-reward run. (The
    # control is not flat: random-reward PPO still makes the policy more decisive, which alone cut the
    # queue by 0-29 % here: median 25.3 against 35.5 at the start, trained 16.8, all six trained runs
    # below all six control runs.)
    assert median(after) < min(control_after), (start, after, control_after)


def test_runs_trained_together_get_what_each_gets_alone(raw_surrogate, tmp_path):
    """Lockstep training (the agent seeds of a row): the runs asking for the same G sample in one
    stacked batch, and each ends with the statistics and adapters it gets trained alone."""
    def policy(seed):
        model, tok = load_surrogate(raw_surrogate)
        return LMPolicy(model, tok, surrogate_ppo_config(group_size=4, seed=seed))

    entropy = {"entropy": "softmax", "tau": 1.0}
    cfgs = [OracleConfig(scenario="synthetic", episodes=2, episode_s=360, update_every_s=180, checkpoint_every_s=180,
                         reward=reward, train_seed=10 * seed, seed=seed)
            for seed, reward in ((0, entropy), (1, entropy), (2, {}))]
    alone = [train(policy(c.seed), prompter, c, tmp_path / f"alone{c.seed}") for c in cfgs]
    policies = [policy(c.seed) for c in cfgs]
    sampled_alone = []
    for p in policies:
        sample = p.sample
        p.sample = lambda prompt, group_size=None, _s=sample, _p=p, **kw: sampled_alone.append(_p) or _s(prompt, group_size, **kw)
    together = train_together(policies, prompter, cfgs, [tmp_path / f"together{c.seed}" for c in cfgs])
    # the two entropy runs (G = 4) never sampled alone; the G = 1 run is the only one of its size
    assert {id(p) for p in sampled_alone} == {id(policies[2])} and len(sampled_alone) == 72
    keys = ("queue", "mean_reward", "invalid_rate", "kl", "update_stats")
    for ours, ref in zip(together, alone):
        assert [{k: e[k] for k in keys} for e in ours["episodes"]] == [{k: e[k] for k in keys} for e in ref["episodes"]]
        assert [p.name for p in ours["checkpoints"]] == [p.name for p in ref["checkpoints"]] and len(ours["checkpoints"]) == 4
        a, b = (torch.load(r["checkpoints"][-1], weights_only=False)["adapters"] for r in (ours, ref))
        assert all(torch.equal(a[k], b[k]) for k in a)
    first, second = (torch.load(r["checkpoints"][-1], weights_only=False)["adapters"] for r in together[:2])
    assert not all(torch.equal(first[k], second[k]) for k in first)  # seeds matter: not one run copied
    with pytest.raises(ValueError, match="2 policies, 3 configs"):
        train_together(policies[:2], prompter, cfgs, [tmp_path] * 3)
