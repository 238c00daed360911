"""Shared fixtures: real recordings and real synthesised speech, small and cached per session.

The test session is hermetic: every cache (CASU's, Hugging Face's datasets cache, matplotlib's)
lives in one temp folder made at import time, before any library reads its cache setting, and
removed at the end of the session. Model weights already in the Hugging Face hub cache stay
readable (offline, read-only)."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

ROOT = Path(__file__).resolve().parents[1]


def _hub_cache() -> str:
    if os.environ.get("HF_HUB_CACHE"):
        return os.environ["HF_HUB_CACHE"]
    home = os.environ.get("HF_HOME") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", "~/.cache"), "huggingface"
    )
    return os.path.join(os.path.expanduser(home), "hub")


def _remove_dead_sessions() -> None:
    """Session folders of test runs that were killed (no clean-up hook ran)."""
    from casu_dataset.core.atomic import pid_alive

    for d in Path(tempfile.gettempdir()).glob("casu-tests-*-*"):
        pid = d.name.split("-")[2]
        if pid.isdigit() and not pid_alive(int(pid)):
            shutil.rmtree(d, ignore_errors=True)


_remove_dead_sessions()
SESSION_DIR = Path(tempfile.mkdtemp(prefix=f"casu-tests-{os.getpid()}-"))
_hub = _hub_cache()
os.environ.update(
    {
        "CASU_CACHE": str(SESSION_DIR / "casu"),
        "HF_HOME": str(SESSION_DIR / "hf"),
        "HF_DATASETS_CACHE": str(SESSION_DIR / "hf" / "datasets"),
        "MPLCONFIGDIR": str(SESSION_DIR / "matplotlib"),
        # Chromium (review test), dconf and other tools' per-user caches and settings.
        "XDG_CACHE_HOME": str(SESSION_DIR / "xdg-cache"),
        "XDG_CONFIG_HOME": str(SESSION_DIR / "xdg-config"),
    }
)
if os.path.isdir(_hub):
    os.environ["HF_HUB_CACHE"] = _hub  # pre-downloaded weights, read offline


def pytest_unconfigure(config):
    shutil.rmtree(SESSION_DIR, ignore_errors=True)


@pytest.fixture(scope="session")
def session_cache() -> Path:
    """The session's CASU cache: speech turns and catalog embeddings computed once for all tests."""
    return Path(os.environ["CASU_CACHE"])


@pytest.fixture(scope="session")
def clips_dir() -> Path:
    from casu_dataset.sounds.bank import bank_dir

    return bank_dir() / "audio"


@pytest.fixture(scope="session")
def speech_wavs(tmp_path_factory) -> list[Path]:
    """Two real flite utterances (female slt, male kal16)."""
    flite = shutil.which("flite")
    assert flite, "flite is required for these tests: `make setup` installs it (apt-get install flite)"
    d = tmp_path_factory.mktemp("speech")
    out = []
    for voice, text in [
        ("slt", "It's time to go, everyone. Please line up by the door."),
        ("kal16", "Okay, we are coming right now."),
    ]:
        p = d / f"{voice}.wav"
        subprocess.run([flite, "-voice", voice, "-t", text, "-o", str(p)], check=True)
        out.append(p)
    return out


HARNESS_FAMILIES = ["ws_ev_my_cue", "ol_first_time_briefing"]  # crossed + slot: every task, 8 scenes
V1_SCENES = ["school_dismissal", "kitchen_kettle", "hotel_wake_call"]  # one has a minimal pair


def fixture_builder(cache: Path | None, lock=None):
    """The scene builder the tests build with: the embedded bank, the available voices, the
    default mix, no Whisper check (fast); `lock`: a realization lock to follow."""
    from casu_dataset.mix.mixer import MixConfig
    from casu_dataset.mix.realize import SceneBuilder
    from casu_dataset.sounds.catalog import Catalog
    from casu_dataset.sounds.retrieval import Retriever
    from casu_dataset.speech.layer import SpeechSynth
    from casu_dataset.speech.voices import VoiceRegistry

    return SceneBuilder(
        Retriever(Catalog.embedded(), cache_dir=cache),
        SpeechSynth(cache),
        VoiceRegistry().available(),
        MixConfig(),
        None,
        lock=lock,
    )


def shipped_families() -> dict[str, dict]:
    """The shipped v2 library's family documents by id, as written in its YAML files."""
    import yaml

    from casu_dataset.families.compile import DEFAULT_V2_DIR

    return {f["id"]: f for p in sorted(DEFAULT_V2_DIR.glob("*.yaml")) for f in yaml.safe_load(p.read_text())}


def build_small(out: Path, lib_dir: Path):
    """Build the HARNESS_FAMILIES of the shipped v2 library (the default CASU-mini) into `out`:
    a library file of those families is written to `lib_dir`, then built as `casu build` does."""
    import yaml

    from casu_dataset.dataset.build import build_dataset
    from casu_dataset.dataset.config import BuildConfig
    from casu_dataset.families.compile import compile_families

    docs = shipped_families()
    lib_dir.mkdir(parents=True, exist_ok=True)
    lib = lib_dir / "families.yaml"
    lib.write_text(yaml.safe_dump([f for f in docs.values() if f["id"] in HARNESS_FAMILIES], sort_keys=False))
    cache = Path(os.environ["CASU_CACHE"])
    config = BuildConfig(out=out, cache=cache, progress=False, max_skips=None)
    return build_dataset(config, compile_families(lib), fixture_builder(cache))


def build_small_v1(out: Path, lib_dir: Path):
    """Build the V1_SCENES of the v1 library into `out` (review decisions next to it are applied)."""
    import yaml

    from casu_dataset.dataset.build import build_dataset
    from casu_dataset.dataset.config import BuildConfig
    from casu_dataset.legacy.library import DEFAULT_DIR, compile_library

    docs = [s for f in sorted(DEFAULT_DIR.glob("*.yaml")) for s in yaml.safe_load(f.read_text())]
    lib_dir.mkdir(parents=True, exist_ok=True)
    (lib_dir / "lib.yaml").write_text(
        yaml.safe_dump([s for s in docs if s["id"] in V1_SCENES], sort_keys=False)
    )
    cache = Path(os.environ["CASU_CACHE"])
    config = BuildConfig(out=out, cache=cache, progress=False, max_skips=None)
    return build_dataset(config, compile_library(lib_dir / "lib.yaml"), fixture_builder(cache))


@pytest.fixture(scope="session")
def casu_small(tmp_path_factory) -> Path:
    """A real built CASU v2 dataset of two contrast families (8 scenes), for the harness."""
    import json

    d = tmp_path_factory.mktemp("casu_small")
    rep = build_small(d / "out", d)
    assert len(rep.built) == 4 * len(HARNESS_FAMILIES) and not rep.skipped, json.dumps(rep.skipped)
    return d / "out"


@pytest.fixture(scope="session")
def casu_small_v1(tmp_path_factory) -> Path:
    """A real built v1 dataset of a few scenes (5 with the pair variants), for tests about v1 data
    (minimal pairs, v1 scene ids)."""
    import json

    d = tmp_path_factory.mktemp("casu_small_v1")
    rep = build_small_v1(d / "out", d)
    assert len(rep.built) == 5, json.dumps(rep.skipped)
    return d / "out"


@contextlib.contextmanager
def transformers_serve(model_dir: str):
    """A real `transformers serve` process for a local model folder on port 0; yields its /v1
    base URL, with the port read from uvicorn's start-up line."""
    import queue
    import sys
    import threading
    import time
    import urllib.request

    exe = os.path.join(os.path.dirname(sys.executable), "transformers")
    proc = subprocess.Popen(
        [exe, "serve", "--host", "127.0.0.1", "--port", "0", model_dir],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    ports: queue.Queue = queue.Queue()
    tail: list[str] = []

    def drain():  # keeps reading to the end so the server never blocks on a full pipe
        for line in proc.stdout:
            tail[:] = (tail + [line])[-20:]
            m = re.search(r"Uvicorn running on https?://[^\s]+:(\d+)", line)
            if m:
                ports.put(int(m.group(1)))
        ports.put(None)

    threading.Thread(target=drain, daemon=True).start()
    try:
        try:
            port = ports.get(timeout=180)
        except queue.Empty:
            pytest.fail("transformers serve did not start in 180 s:\n" + "".join(tail))
        if port is None:
            pytest.fail("transformers serve exited during start-up:\n" + "".join(tail))
        for _ in range(120):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1)
                break
            except OSError:
                if proc.poll() is not None:
                    pytest.fail("transformers serve exited during start-up:\n" + "".join(tail))
                time.sleep(0.5)
        else:
            pytest.fail("transformers serve did not answer /health in 60 s")
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@pytest.fixture(autouse=True)
def _forget_registered_secrets():
    """Keys a test registers with casu_dataset.core.redact stay that test's: a later test's paths and
    messages must not be masked because an earlier one used a key made of common words."""
    yield
    from casu_dataset.core import redact

    redact._EXTRA.clear()


def call_main(main, argv) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of a CLI `main(argv)` run in this process."""
    import contextlib
    import io

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main(list(argv))
        except SystemExit as e:
            rc = e.code
    return rc, out.getvalue(), err.getvalue()
