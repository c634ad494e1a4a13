"""LLM-enhanced reward design for bus holding (bus paper §4, App. A).

* ``loop.py`` — the loop of §4 (initialise → train → test → analyse → modify, refiner) over a
  ``Designer`` protocol; ``variants.py`` — the §5.2.4 methods and §5.2.5 ablations as loop settings.
* ``search.py`` — the search designer (no LLM); ``designer.py`` — the LLM designer; ``prompts.py`` —
  the Appendix A prompts; ``direct.py`` — the LLM-direct controller (App. A.5).
* ``extract.py``, ``sandbox.py``, ``worker.py`` — generated code: extraction, checks, sandboxed evaluation.
* ``candidates.py`` — training and testing candidate rewards on the simulator; ``jobs.py`` — the
  notebooks' cached jobs (dataclass results); ``tables.py``, ``plots.py`` — their tables and figures.
"""
