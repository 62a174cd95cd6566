"""service/engine/llm."""
