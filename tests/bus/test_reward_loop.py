"""The refiner, repair and ablation logic of the reward-design loop, on scripted designers."""

import pytest

from llmtraffic.bus.reward_design.loop import LoopConfig, Reply, Trial, run_loop


class Scripted:
    """A designer that answers from a list, recording which role was asked."""

    name = "scripted"

    def __init__(self, codes):
        self.codes = list(codes)
        self.calls = []

    def _next(self, role):
        self.calls.append(role)
        return Reply(self.codes.pop(0))

    def initial(self):
        return self._next("initial")

    def analyze(self, code, trial):
        self.calls.append("analyze")
        return f"analysis of {code}"

    def modify(self, code, trial, analysis):
        return self._next("modify")

    def refine(self, failed_code, failed, kept_code, kept):
        self.calls.append(f"refine:{failed_code}>{kept_code}")
        return Reply(self.codes.pop(0))

    def repair(self, code, reason):
        self.calls.append(f"repair:{reason}")
        return Reply(self.codes.pop(0))


TT = {"start": 100.0, "good": 95.0, "bad": 120.0, "ok": 104.0, "better": 90.0, "nan": float("nan")}


def evaluate(code, iteration):
    if code == "crash":
        raise ZeroDivisionError("reward divided by zero")
    return Trial({"travel_time_s": TT[code]})


def validate(code):
    return (code != "invalid", "syntax error" if code == "invalid" else "")


def test_refiner_rejects_beyond_slack_and_asks_for_another_reward():
    d = Scripted(["good", "bad", "ok", "better"])
    out = run_loop(d, evaluate, validate, LoopConfig(iterations=4, slack=0.1), expert_code="start", progress=False)
    h = out.history()
    assert list(h["accepted"]) == [True, True, False, True, True]
    assert "refiner: travel time 120.0 s > kept 95.0 s" in h.loc[2, "reason"]
    assert "refine:bad>good" in d.calls  # the failed reward and the kept one go back to the designer
    assert out.final_code == "better" and out.final.travel_time == 90.0
    # accepted 'ok' (104) is worse than its predecessor (95) but within 10 %
    assert h.loc[3, "accepted"] and h.loc[3, "travel_time_s"] <= 95.0 * 1.1


def test_the_loop_reports_the_last_accepted_reward_not_the_best():
    d = Scripted(["better", "ok"])
    out = run_loop(d, evaluate, validate, LoopConfig(iterations=2, slack=0.2), expert_code="start", progress=False)
    # 104 <= 90 × 1.2: accepted, and the loop's answer although 'better' (90) tested lower
    assert list(out.history()["accepted"]) == [True, True, True]
    assert out.final_code == "ok" and out.final.travel_time == 104.0


def test_a_regression_beyond_the_slack_is_rejected_with_the_refiner_and_kept_without():
    with_refiner = run_loop(Scripted(["better", "bad", "good"]), evaluate, validate, LoopConfig(iterations=2, slack=0.1),
                            expert_code="start", progress=False)
    assert list(with_refiner.history()["accepted"]) == [True, True, False]  # 120 > 90 × 1.1
    assert with_refiner.final_code == "better"
    without = run_loop(Scripted(["better", "bad"]), evaluate, validate, LoopConfig(iterations=2, slack=0.1, refiner=False),
                       expert_code="start", progress=False)
    assert list(without.history()["accepted"]) == [True, True, True]
    assert without.final_code == "bad" and without.final.travel_time == 120.0  # the last one, not the best


def test_the_refiner_compares_with_the_predecessor_not_the_best():
    # start 100 → ok 104 (within 10 %) → 'bad' 120 > 104 × 1.1 rejected; a 'good' 95 is fine
    d = Scripted(["ok", "good"])
    out = run_loop(d, evaluate, validate, LoopConfig(iterations=2, slack=0.05), expert_code="start", progress=False)
    assert list(out.history()["accepted"]) == [True, True, True]  # 104 <= 100 × 1.05, 95 <= 104 × 1.05


def test_slack_schedule_tightens():
    d = Scripted(["good", "ok"])
    out = run_loop(d, evaluate, validate, LoopConfig(iterations=2, slack=[0.1, 0.1, 0.01]), expert_code="start", progress=False)
    assert list(out.history()["accepted"]) == [True, True, False]  # 104 > 95 × 1.01 at iteration 2


def test_invalid_and_crashing_rewards_are_repaired_and_the_loop_goes_on():
    d = Scripted(["invalid", "crash", "good", "better"])
    out = run_loop(d, evaluate, validate, LoopConfig(iterations=2, tries=3), expert_code="start", progress=False)
    h = out.history()
    assert list(h["role"]) == ["initial", "modify", "repair", "repair", "modify"]
    assert list(h["valid"]) == [True, False, False, True, True]
    assert h.loc[2, "reason"] == "training or testing failed: ZeroDivisionError: reward divided by zero"
    assert "repair:syntax error" in d.calls and out.final_code == "better"


def test_nan_travel_time_counts_as_failure():
    d = Scripted(["nan", "good"])
    out = run_loop(d, evaluate, validate, LoopConfig(iterations=1, tries=2), expert_code="start", progress=False)
    assert "test travel time is nan" in out.history().loc[1, "reason"] and out.final_code == "good"


def test_ablations_without_refiner_and_analyzer_and_cold_start():
    d = Scripted(["bad", "good"])
    out = run_loop(d, evaluate, validate, LoopConfig(iterations=2, refiner=False, analyzer=False), expert_code="start", progress=False)
    assert list(out.history()["accepted"]) == [True, True, True] and "analyze" not in d.calls
    d = Scripted(["start", "good"])
    run_loop(d, evaluate, validate, LoopConfig(iterations=1, start="cold"), progress=False)
    assert d.calls[0] == "initial"
    with pytest.raises(ValueError, match="needs expert_code"):
        run_loop(d, evaluate, validate, LoopConfig(start="warm"), progress=False)


def test_target_stops_early():
    d = Scripted(["better", "good", "good"])
    out = run_loop(d, evaluate, validate, LoopConfig(iterations=3, target_travel_time_s=92.0), expert_code="start", progress=False)
    assert out.history()["iteration"].max() == 1


class Counting(Scripted):
    """A scripted designer that counts its requests and tokens like the LLM designer (10 prompt and
    3 completion tokens per request)."""

    def __init__(self, codes):
        super().__init__(codes)
        self.requests = 0

    def usage(self):
        return {"calls": self.requests, "prompt_tokens": 10 * self.requests, "completion_tokens": 3 * self.requests}

    def _next(self, role):
        self.requests += 1
        return super()._next(role)

    def analyze(self, code, trial):
        self.requests += 1
        return super().analyze(code, trial)

    def repair(self, code, reason):
        self.requests += 1
        return super().repair(code, reason)


def test_a_model_that_never_writes_valid_code_ends_labelled_within_k_tries():
    d = Counting(["invalid"] * 10)
    out = run_loop(d, evaluate, validate, LoopConfig(iterations=3, start="cold", tries=3), progress=False)
    assert not out.ok and out.final_code is None and out.final is None
    assert out.failure == "no valid reward in 3 tries (3 answers invalid: 3 × syntax error)"
    h = out.history()
    assert list(h["role"]) == ["initial", "repair", "repair"] and list(h["try"]) == [1, 2, 3]
    assert d.requests == 3 and len(d.codes) == 7  # the K-th try is the last request: no fourth
    assert [c["role"] for c in out.calls] == ["initializer", "repair (error feedback)", "repair (error feedback)"]
    assert [(c["requests"], c["prompt_tokens"], c["completion_tokens"]) for c in out.calls] == [(1, 10, 3)] * 3


def test_every_designer_call_is_measured_by_role_and_iteration():
    d = Counting(["invalid", "good", "bad", "better"])
    out = run_loop(d, evaluate, validate, LoopConfig(iterations=2, slack=0.1, tries=2), expert_code="start", progress=False)
    roles = [(c["iteration"], c["role"]) for c in out.calls]
    assert roles == [(1, "analyzer"), (1, "modifier"), (1, "repair (error feedback)"), (2, "analyzer"), (2, "modifier")]
    assert sum(c["requests"] for c in out.calls) == d.requests == 5
    assert all(c["wall_s"] >= 0 and c["llm_s"] == 0 for c in out.calls)  # the scripted designer reports no LLM time
    assert list(out.history()["written"]) == [False, True, True, True]  # the warm start is given, not written


def test_k_counts_the_first_try_and_must_be_positive():
    with pytest.raises(ValueError, match="tries"):
        LoopConfig(tries=0)
    d = Scripted(["invalid", "good"])
    out = run_loop(d, evaluate, validate, LoopConfig(iterations=1, tries=1), expert_code="start", progress=False)
    assert list(out.history()["valid"]) == [True, False] and not any(c.startswith("repair") for c in d.calls)


def test_the_trajectory_draws_the_best_so_far_the_rejected_and_the_invalid_answers():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from llmtraffic.bus.reward_design.plots import plot_trajectory

    d = Scripted(["invalid", "good", "bad", "better"])
    out = run_loop(d, evaluate, validate, LoopConfig(iterations=3, slack=0.1, tries=2), expert_code="start", progress=False)
    fig, ax = plt.subplots()
    plot_trajectory(out, ax=ax, label="seed 0")
    lines = {line.get_label(): line for line in ax.get_lines()}
    assert list(lines["seed 0: best so far"].get_ydata()) == [100.0, 95.0, 95.0, 90.0]
    assert list(lines["seed 0: rejected"].get_ydata()) == [120.0]
    assert [t.get_text() for t in ax.texts] == ["1 invalid"]
    failed = run_loop(Scripted(["invalid"] * 2), evaluate, validate, LoopConfig(start="cold", tries=2), progress=False)
    ax.clear()
    plot_trajectory(failed, ax=ax, label="seed 1")
    assert ax.texts[0].get_text() == "seed 1:\nno valid reward in 2 tries (2 answers invalid: 2 × syntax error)"
    plt.close(fig)
