"""llmtraffic: LLMs inside the reinforcement-learning loop for traffic control.

Subpackages: ``study`` (profiles, papermill runner, outputs, provenance, sweeps),
``bus`` (bus-holding study), ``signal`` (OracleTSC study), ``rl`` and ``llm`` (shared).
"""

__version__ = "0.1.0"
