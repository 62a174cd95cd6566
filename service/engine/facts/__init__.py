"""service/engine/facts."""
