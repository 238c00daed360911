"""Shared fixtures: real recordings and real synthesised speech, small and cached per session."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def clips_dir() -> Path:
    from casu_dataset.bank import bank_dir
    return bank_dir() / "audio"


@pytest.fixture(scope="session")
def speech_wavs(tmp_path_factory) -> list[Path]:
    """Two real flite utterances (female slt, male kal16)."""
    flite = shutil.which("flite")
    assert flite, "flite is required for these tests: `make setup` installs it (apt-get install flite)"
    d = tmp_path_factory.mktemp("speech")
    out = []
    for voice, text in [("slt", "It's time to go, everyone. Please line up by the door."),
                        ("kal16", "Okay, we are coming right now.")]:
        p = d / f"{voice}.wav"
        subprocess.run([flite, "-voice", voice, "-t", text, "-o", str(p)], check=True)
        out.append(p)
    return out
