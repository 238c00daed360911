"""The shipped scenario data (no code): CASU-mini v2 families, v1 scenes, example scripts and their reports.

Every module finds the data through these paths, so moving code never breaks them."""

from pathlib import Path

HERE = Path(__file__).parent
FAMILY_LIBRARY_DIR = HERE / "casu_mini_v2"  # the default library: 128 contrast families
SCENE_LIBRARY_DIR = HERE / "casu_mini"  # the legacy v1 library of single scenes
EXAMPLES_DIR = HERE / "examples"
