"""Contrast families (CASU-mini v2): the format's compiler, shared timelines, validity,
honest-reader audit and the LLM family generator."""
