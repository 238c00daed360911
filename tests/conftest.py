"""Shared fixtures: real recordings and real synthesised speech, small and cached per session."""
from __future__ import annotations

import contextlib
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


HARNESS_SCENES = ["school_dismissal", "kitchen_kettle", "hotel_wake_call"]  # one has a minimal pair


def build_small(out: Path, lib_dir: Path):
    """Build the HARNESS_SCENES into `out` (review decisions next to it are applied)."""
    import yaml

    from casu_dataset.build import build_dataset
    from casu_dataset.catalog import Catalog
    from casu_dataset.mixer import MixConfig
    from casu_dataset.realize import SceneBuilder
    from casu_dataset.retrieval import Retriever
    from casu_dataset.scenarios.library import DEFAULT_DIR, compile_library
    from casu_dataset.speech.layer import SpeechSynth
    from casu_dataset.speech.voices import VoiceRegistry
    docs = [s for f in sorted(DEFAULT_DIR.glob("*.yaml")) for s in yaml.safe_load(f.read_text())]
    lib_dir.mkdir(parents=True, exist_ok=True)
    (lib_dir / "lib.yaml").write_text(yaml.safe_dump([s for s in docs if s["id"] in HARNESS_SCENES], sort_keys=False))
    cache = Path(os.environ.get("CASU_CACHE", Path.home() / ".cache" / "casu"))
    builder = SceneBuilder(Retriever(Catalog.embedded(), cache_dir=cache), SpeechSynth(cache),
                           VoiceRegistry().available(), MixConfig(), None)
    return build_dataset(out, compile_library(lib_dir / "lib.yaml"), builder, seed=0, cache_dir=cache, progress=False)


@pytest.fixture(scope="session")
def casu_small(tmp_path_factory) -> Path:
    """A real built CASU dataset of a few scenes (5 with the pair variants), for the harness."""
    import json
    d = tmp_path_factory.mktemp("casu_small")
    rep = build_small(d / "out", d)
    assert len(rep.built) == 5, json.dumps(rep.skipped)
    return d / "out"


def free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def transformers_serve(model_dir: str):
    """A real `transformers serve` process for a local model folder; yields its /v1 base URL."""
    import subprocess
    import sys
    import time
    import urllib.request
    port = free_port()
    exe = os.path.join(os.path.dirname(sys.executable), "transformers")
    proc = subprocess.Popen([exe, "serve", "--port", str(port), model_dir], stdout=subprocess.DEVNULL,
                            stderr=subprocess.STDOUT, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    try:
        for _ in range(240):
            try:
                urllib.request.urlopen(f"http://localhost:{port}/health", timeout=1)
                break
            except OSError:
                if proc.poll() is not None:
                    pytest.fail("transformers serve exited during start-up")
                time.sleep(0.5)
        else:
            pytest.fail("transformers serve did not start in 120 s")
        yield f"http://localhost:{port}/v1"
    finally:
        proc.terminate()
        proc.wait(timeout=30)
