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
from helpers import call_main, harness_cli, harness_run  # noqa: F401  (tests import them from here too)

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

    from casu_dataset.families.compile import DEFAULT_FAMILY_LIBRARY

    files = sorted(DEFAULT_FAMILY_LIBRARY.glob("*.yaml"))
    return {f["id"]: f for p in files for f in yaml.safe_load(p.read_text())}


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


def tiny_dataset(out: Path, n: int, tag: str, answer: str = "A") -> Path:
    """A CASU-layout folder (card + one parquet per config) with n role_inference questions,
    written with the builder's own writer; every other config is empty."""
    import numpy as np

    from casu_dataset.core.audio_io import encode_flac
    from casu_dataset.dataset.build import CONFIGS
    from casu_dataset.dataset.writer import write_parquet

    rng = np.random.default_rng(n)
    rows = {c: [] for c in CONFIGS}
    for i in range(n):
        sid = f"{tag}_scene{i}"
        audio = {
            "bytes": encode_flac(0.1 * rng.standard_normal(1600).astype("float32")),
            "path": f"{sid}/mix.flac",
        }
        rows["role_inference"].append(
            {
                "id": f"{sid}/q0",
                "scene_id": sid,
                "task": "role_inference",
                "audio": audio,
                "question": f"Who speaks in {tag} {i}?",
                "options": ["w", "x", "y", "z"],
                "answer": answer,
                "rationale": "",
                "layers": ["speech"],
                "minimal_pair_id": "",
                "place": "kitchen",
                "speech_type": "dialogue",
            }
        )
    for c in CONFIGS:
        write_parquet(rows[c], c, out / c / "test-00000-of-00001.parquet")
    cfg = "\n".join(
        f"- config_name: {c}\n  data_files:\n  - split: test\n    path: {c}/*.parquet" for c in CONFIGS
    )
    (out / "README.md").write_text(f"---\nconfigs:\n{cfg}\n---\n# tiny {tag}\n")
    return out


@pytest.fixture(scope="module")
def corpus_ctx(tmp_path_factory):
    """The context the bad-input corpora (tests/bad_input_corpus.py) run their cases in: a tiny
    dataset and the results of one good harness run on it. Every case changes one thing of that
    base command, so the base command must work."""
    from bad_input_corpus import Ctx

    root = tmp_path_factory.mktemp("corpus")
    c = Ctx(root, tiny_dataset(root / "ds", 4, "b"))
    c.tmp = root
    base = c.run()
    assert base.code == 0, base.text
    c.extra["results"] = root / "res"
    return c


@pytest.fixture
def ckpt_model(monkeypatch) -> str:
    """The `--model` spec of the random chooser under a checkpoint name (Ckpt, in
    tests/fixtures/plugin_adapters.py), with that folder importable."""
    monkeypatch.syspath_prepend(str(ROOT / "tests" / "fixtures"))
    return "plugin_adapters:Ckpt"


@pytest.fixture
def online(monkeypatch):
    """The Hub client allowed to talk -- to a local server only; returns huggingface_hub.constants."""
    import huggingface_hub.constants as C

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(C, "HF_HUB_OFFLINE", False)
    return C


@pytest.fixture
def online_with_token(online, monkeypatch):
    """`online`, with a fake token and a Hub timeout of 1 s."""
    monkeypatch.setenv("HF_TOKEN", "hf_FAKEtoken1234567890")
    monkeypatch.setenv("CASU_HUB_TIMEOUT", "1")
    return online


@pytest.fixture
def two_runs(ds, tmp_path, ckpt_model):
    """A full run and a newer --limit run of one checkpoint (the requesting module's `ds`)."""
    out = tmp_path / "r"
    for extra in ((), ("--limit", "3")):
        rc, _, err = harness_run(ds, out, "--model_args", "pretrained=Org/M", *extra, model=ckpt_model)
        assert rc == 0, err
    return out


@pytest.fixture
def no_torchcodec(monkeypatch):
    """Make `import torchcodec` fail as on the standard (CPU torch) install, wherever this runs."""
    import sys

    monkeypatch.setitem(sys.modules, "torchcodec", None)


def folder_bytes(folder: Path) -> dict[str, bytes]:
    """Every file under `folder` by its relative path: two builds are the same artifact when equal."""
    return {
        p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()
    }


def question_counts(folder: Path) -> dict[str, int]:
    """Rows per multiple-choice config of a built folder."""
    import pyarrow.parquet as pq

    from casu_dataset.contract import mcq_configs

    return {c: pq.read_table(str(folder / c), use_threads=False).num_rows for c in mcq_configs()}


FAMILY_FIXTURE = ROOT / "tests" / "fixtures" / "families" / "two_families.yaml"


def _tone_scene(scene, k: int, sr: int = 16000) -> dict:
    """A stand-in for a rendered scene: 2 s of tones and the annotation fields the review page reads."""
    import numpy as np

    from casu_dataset.core.audio_io import encode_flac

    t = np.arange(2 * sr) / sr
    stems = {
        "background": 0.05 * np.sin(2 * np.pi * 120 * t),
        "speech": 0.2 * np.sin(2 * np.pi * 220 * t),
        "events": 0.2 * np.sin(2 * np.pi * (500 + 100 * k) * t),
    }
    stems["mixture"] = sum(stems.values())
    s = scene.script
    turns = [
        {"speaker": tr.speaker, "text": tr.text, "onset": 0.1 + 0.8 * i, "offset": 0.8 + 0.8 * i}
        for i, tr in enumerate(s.turns)
    ]
    events = [{"id": e.id, "description": e.description, "onset": 0.9, "offset": 1.4} for e in s.events]
    ann = {"scene_id": s.id, "sample_rate": sr, "script": s.to_dict(), "turns": turns, "events": events}
    return {"annotation": ann, "flac": {k: encode_flac(v) for k, v in stems.items()}}


def fixture_family_rows() -> dict[str, list[dict]]:
    """The rows of every config for the two fixture families, compiled for real and turned into
    rows by the build's own row writer, with tone audio instead of a render (well under a second)."""
    from casu_dataset.dataset.build import CONFIGS
    from casu_dataset.dataset.rows import scene_rows
    from casu_dataset.families.compile import compile_families

    rows = {c: [] for c in CONFIGS}
    for k, scene in enumerate(compile_families(FAMILY_FIXTURE)):
        for c, r in scene_rows(scene, _tone_scene(scene, k)).items():
            rows[c].extend(r)
    return rows


def write_dataset(rows: dict, out: Path) -> Path:
    """`rows` (config -> rows) written as a built folder's parquet files."""
    from casu_dataset.dataset.build import CONFIGS
    from casu_dataset.dataset.writer import PARQUET, write_parquet

    for c in CONFIGS:
        write_parquet(rows[c], c, out / c / PARQUET)
    return out


def chromium():
    """A headless Chromium (selenium) that may play audio, for the review page tests."""
    from selenium import webdriver

    opts = webdriver.ChromeOptions()
    opts.binary_location = "/usr/bin/chromium"
    for a in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--autoplay-policy=no-user-gesture-required",
        "--mute-audio",
        "--window-size=1400,1000",
    ):
        opts.add_argument(a)
    return webdriver.Chrome(
        options=opts, service=webdriver.ChromeService(executable_path="/usr/bin/chromedriver")
    )


def wait_for(fn, timeout=20.0):
    """fn()'s first truthy value, polled every 0.1 s; an AssertionError after `timeout` seconds."""
    import time

    t0 = time.time()
    while time.time() - t0 < timeout:
        v = fn()
        if v:
            return v
        time.sleep(0.1)
    raise AssertionError("timed out waiting for the page")
