"""service/engine/release."""
