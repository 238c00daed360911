"""All LLM generation: the scene-script pipeline (paper, Stage 1 scripts and figure 2c questions),
the contrast-family agents and their critic panel."""
