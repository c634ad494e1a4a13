"""llm subpackage."""
