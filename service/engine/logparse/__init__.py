"""service/engine/logparse."""
