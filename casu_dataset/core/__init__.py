"""Shared infrastructure: errors, cache layout, content keys, atomic writes, audio I/O, loudness,
redaction, instruction-set settings, the Hub client and LLM backends (the harness may use it)."""
