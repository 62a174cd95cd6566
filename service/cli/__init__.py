"""service/cli."""
