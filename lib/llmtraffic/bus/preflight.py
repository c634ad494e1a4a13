"""The bus study's pre-flight check, registered with the harness (:mod:`llmtraffic.study.preflight`).

A ``designer`` other than ``search`` (or its former name ``rules``) needs an ``llm`` config: a
setting that can never work otherwise (:class:`~llmtraffic.study.params.ParamError`, exit status 2).
"""

from __future__ import annotations

from typing import Any

from ..study import preflight

NO_LLM_DESIGNERS = (None, "search", "rules")
"""Designer names that need no LLM: the search designer (``rules`` is its former name)."""


def designer_problem(params: dict[str, Any]) -> str | None:
    """Why the ``designer`` of ``params`` can never run with its ``llm``, or None."""
    designer = params.get("designer")
    if "llm" in params and params["llm"] is None and designer not in NO_LLM_DESIGNERS:
        return (f"designer {designer!r} needs an llm config: add --set llm='{{backend: openai, "
                f"base_url: ..., model: {designer}}}' (README, 'Plugging in an LLM'), or leave designer=search "
                f"to run without an LLM")
    return None


preflight.register_setting("designer", designer_problem)
