"""service/engine/locate."""
