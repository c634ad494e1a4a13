"""LLM designers for the reward-design loop: the paper's modules and two existing methods.

:class:`LLMDesigner` asks an :class:`~llmtraffic.llm.LLM` through the prompts of Appendix A
(initializer A.1, modifier A.2, analyzer A.3, refiner A.4, and a repair prompt carrying a rejected
candidate's reason). The existing LLM-enhanced RL methods the paper compares with (§5.2.4) are the
same designer under other loop settings (``variants.py``); in the critic variant the analyzer
reviews each reward from its code alone (``critic=True``).
"""

from __future__ import annotations

from collections.abc import Mapping

from ...llm import LLM
from . import decoding as dec, prompts
from .extract import extract_code
from .loop import Reply, Trial


ROLES = ("initializer", "analyzer", "modifier", "refiner", "repair")
"""The roles whose answers a per-role ``max_tokens`` caps (``repair``: the error feedback's answer)."""

SEED_STRIDE = 10_000
"""Request seeds of the design run with seed ``s`` are ``s * SEED_STRIDE + 0, 1, …``: design runs
with different seeds never share a sampling seed (fewer than this many requests per run)."""


def role_caps(max_tokens: int | Mapping[str, int]) -> dict[str, int]:
    """The answer-length cap of every role: one number for all, or one per role of :data:`ROLES`."""
    if isinstance(max_tokens, Mapping):
        unknown, missing = set(max_tokens) - set(ROLES), set(ROLES) - set(max_tokens)
        if unknown or missing:
            raise ValueError(f"max_tokens per role needs exactly the roles {', '.join(ROLES)}; "
                             f"unknown {sorted(unknown)}, missing {sorted(missing)}")
        caps = dict(max_tokens)
    else:
        caps = dict.fromkeys(ROLES, max_tokens)
    for role, cap in caps.items():
        if not isinstance(cap, int) or isinstance(cap, bool) or cap < 1:
            raise ValueError(f"max_tokens of the {role} must be an integer >= 1, got {cap!r}")
    return caps


class LLMDesigner:
    """The :class:`~.loop.Designer` protocol answered by an LLM.

    ``decoding`` (:data:`.decoding.DECODINGS`): ``free`` (the paper's), or one of the labelled
    variants beyond it, ``grammar`` (constrained decoding), ``structured`` (terms and weights that
    compile to code) and ``fenced`` (the answer ends at its code block's closing fence). The analyzer's text is never constrained. ``max_tokens`` caps every
    answer, or each role's (:func:`role_caps`): the paper's prompts ask for no length, and the
    analyzer's diagnosis needs fewer tokens than a whole reward function."""

    def __init__(self, llm: LLM, setting: prompts.Setting, temperature: float = 0.7,
                 max_tokens: int | Mapping[str, int] = 1500, seed: int | None = 0, critic: bool = False,
                 decoding: str = "free"):
        if decoding not in dec.DECODINGS:
            raise ValueError(f"decoding must be one of {dec.DECODINGS}, got {decoding!r}")
        self.llm, self.setting = llm, setting
        self.temperature, self.caps, self.seed = temperature, role_caps(max_tokens), seed
        self.critic, self.decoding = critic, decoding
        self.name = f"{llm.backend.model}" + (" (critic)" if critic else "")
        self._calls = 0

    def usage(self) -> dict:
        """The LLM's request and token totals so far (the loop measures each call by them)."""
        return self.llm.usage().as_dict()

    def request_seed(self, call: int) -> int | None:
        """Sampling seed of this designer's ``call``-th request (:data:`SEED_STRIDE`): one per request,
        since with a fixed seed an API would answer the k samples of an Eureka-style iteration
        (identical prompts) k times alike, and disjoint between design runs."""
        return None if self.seed is None else self.seed * SEED_STRIDE + call

    def _ask(self, messages: list[dict], role: str, **constraint) -> str:
        seed = self.request_seed(self._calls)
        self._calls += 1
        return self.llm.complete(messages, n=1, temperature=self.temperature,
                                 max_tokens=self.caps[role], seed=seed, **constraint)[0]

    def _code(self, messages: list[dict], role: str) -> Reply:
        s = self.setting
        if self.decoding == "structured":
            messages = dec.with_structured_output(messages, s.multi_line, s.state_dim)
            text = self._ask(messages, role, json_schema=dec.schema(s.multi_line, s.state_dim))
            code = dec.compile_terms(text, s.state_dim, label=self.name)
        else:
            constraint = {"grammar": {"grammar": dec.GRAMMAR}, "fenced": {"stop": [dec.FENCE_END]}}
            text = self._ask(messages, role, **constraint.get(self.decoding, {}))
            code = extract_code(text)
        return Reply(code, prompt=messages[-1]["content"], response=text)

    def initial(self) -> Reply:
        return self._code(prompts.initializer(self.setting), "initializer")

    def analyze(self, code: str, trial: Trial) -> str:
        if self.critic:  # judge the code alone: no training curve, no test results
            return self._ask(prompts.analyzer(self.setting, code, [], {}), "analyzer")
        return self._ask(prompts.analyzer(self.setting, code, trial.curve, trial.metrics, trial.transitions), "analyzer")

    def modify(self, code: str, trial: Trial, analysis: str | None) -> Reply:
        feedback = analysis or prompts.results(trial.curve, trial.metrics, trial.transitions)
        return self._code(prompts.modifier(self.setting, code, feedback), "modifier")

    def refine(self, failed_code: str, failed: Trial, kept_code: str, kept: Trial) -> Reply:
        return self._code(prompts.refiner(self.setting, failed_code, failed.metrics, kept_code, kept.metrics), "refiner")

    def repair(self, code: str, reason: str) -> Reply:
        return self._code(prompts.repair(self.setting, code, reason), "repair")
