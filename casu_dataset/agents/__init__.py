"""LLM agent pipeline (paper, Stage 1 scripts and figure 2c questions)."""
