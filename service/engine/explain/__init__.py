"""service/engine/explain."""
