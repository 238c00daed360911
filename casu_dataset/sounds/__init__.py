"""Stage 2a, sounds: the embedded bank, catalogs, matching-score retrieval and clip checks."""
