"""Contrast families (CASU-mini v2): the format's compiler, building a family as one unit,
the build's preflight checks, validity and the honest-reader audit (their LLM generator is in
casu_dataset/agents/)."""
