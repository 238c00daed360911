"""Stage 4, scenes -> a built folder: the build, scene cache, executors and card (the files it
writes are read through casu_dataset/formats/)."""
