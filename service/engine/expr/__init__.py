"""The three-valued interpreter conditions are evaluated in (syntax: :mod:`kb.conditions`)."""
