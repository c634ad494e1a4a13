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
    out = run_loop(d, evaluate, validate, LoopConfig(iterations=2, max_retries=2), expert_code="start", progress=False)
    h = out.history()
    assert list(h["role"]) == ["initial", "modify", "repair", "repair", "modify"]
    assert list(h["valid"]) == [True, False, False, True, True]
    assert h.loc[2, "reason"] == "training or testing failed: ZeroDivisionError: reward divided by zero"
    assert "repair:syntax error" in d.calls and out.final_code == "better"


def test_nan_travel_time_counts_as_failure():
    d = Scripted(["nan", "good"])
    out = run_loop(d, evaluate, validate, LoopConfig(iterations=1, max_retries=1), expert_code="start", progress=False)
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
