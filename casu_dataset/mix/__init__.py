"""Stage 3, layers -> one scene: realisation, time-aligned mixing with loudness control, cue checks."""
