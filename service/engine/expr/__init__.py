"""service/engine/expr."""
