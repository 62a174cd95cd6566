"""service/engine/flags."""
