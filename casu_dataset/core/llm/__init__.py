"""Text LLM backends (local transformers, OpenAI-compatible HTTP) with a response cache."""
