"""The refiner, repair and ablation logic of the reward-design loop, on scripted designers."""

import pytest

from llmtraffic.bus.reward_design.loop import LoopConfig, Reply, Trial, run_loop
from llmtraffic.bus.reward_design.rules import RulesDesigner, Weights, render


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

    def refine(self, failed_code, failed, best_code, best):
        self.calls.append(f"refine:{failed_code}>{best_code}")
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
    assert "refiner: travel time 120.0 s > best 95.0 s" in h.loc[2, "reason"]
    assert "refine:bad>good" in d.calls  # the failed reward and the best one go back to the designer
    assert out.best_code == "better" and out.best.travel_time == 90.0
    # accepted 'ok' (104) is worse than the best (95) but within 10 %: kept as current, not best
    assert h.loc[3, "accepted"] and h.loc[3, "travel_time_s"] <= 95.0 * 1.1


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
    assert "repair:syntax error" in d.calls and out.best_code == "better"


def test_nan_travel_time_counts_as_failure():
    d = Scripted(["nan", "good"])
    out = run_loop(d, evaluate, validate, LoopConfig(iterations=1, max_retries=1), expert_code="start", progress=False)
    assert "test travel time is nan" in out.history().loc[1, "reason"] and out.best_code == "good"


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


def test_rules_designer_edits_by_metrics_and_reverts_on_rejection():
    d = RulesDesigner(scheduled_headway_s=300.0, hold_limit_s=20.0, sd_limit=0.25, step=2.0)
    start = render(Weights())
    long_hold = d.modify(start, Trial({"travel_time_s": 1, "hold_time_s": 30.0, "headway_sd_s": 10.0}), None)
    assert d.weights(long_hold.code) == Weights(balance=1.0, improve=0.0, hold=1.0, long_hold=1.0, onboard=1.0)
    irregular = d.modify(start, Trial({"travel_time_s": 1, "hold_time_s": 5.0, "headway_sd_s": 100.0}), None)
    assert d.weights(irregular.code) == Weights(balance=2.0, improve=1.0, hold=0.5)
    calm = d.modify(start, Trial({"travel_time_s": 1, "hold_time_s": 5.0, "headway_sd_s": 10.0}), None)
    assert d.weights(calm.code).hold == 0.25
    back = d.refine(irregular.code, Trial({"travel_time_s": 2}), start, Trial({"travel_time_s": 1}))
    w = d.weights(back.code)
    assert w.balance == pytest.approx(2 ** -0.5) and w.hold == 0.5  # opposite edit, half strength, from the best
    assert "headway SD 100.0 s > 0.25 × 300 s" in d.analyze(start, Trial({"travel_time_s": 1, "hold_time_s": 0, "headway_sd_s": 100.0}))


def test_rules_reward_code_computes_its_components():
    w = Weights(balance=1.0, improve=2.0, hold=0.5, long_hold=1.0, onboard=3.0)
    namespace = {}
    exec(compile(render(w), "<rules>", "exec"), namespace)  # our own template, not generated code
    cur, nxt = [100.0, 300.0, 0, 0, 25.0, 60.0], [150.0, 250.0, 0, 0, 25.0, 65.0]
    # imbalance: 0.5 → 0.25; r = -25 + 2·25 - 0.5 - 1 - 3·0.5
    assert namespace["reward"](cur, 1, nxt) == pytest.approx(-25 + 50 - 0.5 - 1.0 - 1.5)
    assert namespace["reward"](cur, 0, nxt) == pytest.approx(25.0)
