"""service/engine/evaluate."""
