"""bus subpackage."""
