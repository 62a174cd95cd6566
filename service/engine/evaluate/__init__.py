"""Evaluate a check's path condition: the validation chain, earlier writes, what SGLang would choose."""
