"""service/engine/fixes."""
