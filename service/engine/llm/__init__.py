"""The optional LLM explanation: prompt, client and the checks its answer must pass."""
