"""service/engine."""
