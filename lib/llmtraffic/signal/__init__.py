"""signal subpackage."""
