"""The embedded sound bank: real recordings shipped in the package (see ATTRIBUTION.md)."""
from pathlib import Path


def bank_dir() -> Path:
    return Path(__file__).resolve().parent
