"""The deterministic, cited explanation of an answer."""
