"""The rule-card checker, derivation of cards from checks, and the linter."""
