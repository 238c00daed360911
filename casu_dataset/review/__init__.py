"""Human review of a built dataset: a local page to listen, look at the timeline, and accept,
reject or edit scenes and questions; decisions are an append-only file the build applies."""
