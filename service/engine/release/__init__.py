"""Which release raised the error: explicit, hints, frames, warnings, message."""
