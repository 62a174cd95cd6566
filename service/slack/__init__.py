"""service/slack."""
