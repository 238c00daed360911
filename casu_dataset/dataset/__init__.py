"""Stage 4, scenes -> a built folder: the build, scene cache, executors, build record, lock, card,
table schema and the one reader of a built dataset."""
