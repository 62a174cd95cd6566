"""kb/rules."""
