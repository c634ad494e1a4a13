"""LLM designers for the reward-design loop: the paper's modules and two existing methods.

:class:`LLMDesigner` asks an :class:`~llmtraffic.llm.LLM` through the prompts of Appendix A
(initializer A.1, modifier A.2, analyzer A.3, refiner A.4, and a repair prompt carrying a rejected
candidate's reason). The existing LLM-enhanced RL methods the paper compares with (§5.2.4) are the
same designer under other loop settings (``variants.py``); in the critic variant the analyzer
reviews each reward from its code alone (``critic=True``).
"""

from __future__ import annotations

from ...llm import LLM
from . import decoding as dec, prompts
from .extract import extract_code
from .loop import Reply, Trial


class LLMDesigner:
    """The :class:`~.loop.Designer` protocol answered by an LLM.

    ``decoding`` (:data:`.decoding.DECODINGS`): ``free`` (the paper's), or one of the labelled
    variants beyond it, ``grammar`` (constrained decoding) and ``structured`` (terms and weights
    that compile to code). The analyzer's text is never constrained."""

    def __init__(self, llm: LLM, setting: prompts.Setting, temperature: float = 0.7,
                 max_tokens: int = 1500, seed: int | None = 0, critic: bool = False, decoding: str = "free"):
        if decoding not in dec.DECODINGS:
            raise ValueError(f"decoding must be one of {dec.DECODINGS}, got {decoding!r}")
        self.llm, self.setting = llm, setting
        self.temperature, self.max_tokens, self.seed = temperature, max_tokens, seed
        self.critic, self.decoding = critic, decoding
        self.name = f"{llm.backend.model}" + (" (critic)" if critic else "")
        self._calls = 0

    def usage(self) -> dict:
        """The LLM's request and token totals so far (the loop measures each call by them)."""
        return self.llm.usage().as_dict()

    def _ask(self, messages: list[dict], **constraint) -> str:
        # one sampling seed per request (seed, seed + 1, ...): with a fixed seed, an API would
        # answer the k samples of an Eureka-style iteration (identical prompts) k times alike
        seed = None if self.seed is None else self.seed + self._calls
        self._calls += 1
        return self.llm.complete(messages, n=1, temperature=self.temperature,
                                 max_tokens=self.max_tokens, seed=seed, **constraint)[0]

    def _code(self, messages: list[dict]) -> Reply:
        s = self.setting
        if self.decoding == "structured":
            messages = dec.with_structured_output(messages, s.multi_line, s.state_dim)
            text = self._ask(messages, json_schema=dec.schema(s.multi_line, s.state_dim))
            code = dec.compile_terms(text, s.state_dim, label=self.name)
        else:
            text = self._ask(messages, **({"grammar": dec.GRAMMAR} if self.decoding == "grammar" else {}))
            code = extract_code(text)
        return Reply(code, prompt=messages[-1]["content"], response=text)

    def initial(self) -> Reply:
        return self._code(prompts.initializer(self.setting))

    def analyze(self, code: str, trial: Trial) -> str:
        if self.critic:  # judge the code alone: no training curve, no test results
            return self._ask(prompts.analyzer(self.setting, code, [], {}))
        return self._ask(prompts.analyzer(self.setting, code, trial.curve, trial.metrics, trial.transitions))

    def modify(self, code: str, trial: Trial, analysis: str | None) -> Reply:
        feedback = analysis or prompts.results(trial.curve, trial.metrics, trial.transitions)
        return self._code(prompts.modifier(self.setting, code, feedback))

    def refine(self, failed_code: str, failed: Trial, kept_code: str, kept: Trial) -> Reply:
        return self._code(prompts.refiner(self.setting, failed_code, failed.metrics, kept_code, kept.metrics))

    def repair(self, code: str, reason: str) -> Reply:
        return self._code(prompts.repair(self.setting, code, reason))
