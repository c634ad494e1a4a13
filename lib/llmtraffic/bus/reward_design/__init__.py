"""LLM-enhanced reward design for bus holding (bus seed §4, App. A): the loop, designers, prompts, sandbox."""
