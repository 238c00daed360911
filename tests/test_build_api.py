"""The build API (casu_dataset.api) and the CLI package around it: the README example runs on a
tiny library, a config names the bad field, imports change no setting, and a command runs offline
and restores the settings. (That every exception class is a CasuError of one meaning:
tests/test_errors.py.)"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from casu_dataset.dataset.config import BuildConfig, ConfigError

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = Path("tests") / "fixtures" / "families" / "two_families.yaml"


def readme_example() -> str:
    text = (ROOT / "README.md").read_text()
    section = text.split("### Build from Python", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_readme_example_builds_the_tiny_library(tmp_path, session_cache):
    """The README's snippet as written, run where the fixture library sits at the path it names;
    its folder is the one `casu build` writes from the same settings, byte for byte."""
    (tmp_path / FIXTURE).parent.mkdir(parents=True)
    shutil.copy(ROOT / FIXTURE, tmp_path / FIXTURE)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    run = subprocess.run(
        [sys.executable, "-c", readme_example()],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    out = tmp_path / "two_families_built"
    report = json.loads((out / "build_report.json").read_text())
    assert len(report["built"]) == 8 and not report["skipped"]  # two families of four variants
    assert f"8 scenes, 0 skipped, identity {report['identity']['sha256'][:16]}" in run.stdout
    cli = subprocess.run(
        [
            sys.executable,
            "-m",
            "casu_dataset",
            "build",
            "--out",
            "cli_built",
            "--scenarios",
            str(FIXTURE),
            "--no-check-speech",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert cli.returncode == 0, cli.stderr[-3000:]
    assert f"dataset identity {report['identity']['sha256'][:16]}" in cli.stdout
    files = sorted(p.relative_to(out) for p in out.rglob("*") if p.is_file())
    assert files == sorted(
        p.relative_to(tmp_path / "cli_built") for p in (tmp_path / "cli_built").rglob("*") if p.is_file()
    )
    # the card records the command; everything else is the same bytes
    for f in files:
        if f.name not in ("README.md", "build_report.json", "casu_build.json"):
            assert (out / f).read_bytes() == (tmp_path / "cli_built" / f).read_bytes(), f


@pytest.mark.parametrize(
    "kw, field, needle",
    [
        ({"seed": -1}, "seed", "must be >= 0"),
        ({"seed": 1.5}, "seed", "not an integer"),
        ({"alpha": 2.0}, "alpha", "in 0..1"),
        ({"alpha": float("nan")}, "alpha", "not a finite number"),
        ({"duration": 0}, "duration", "> 0"),
        ({"num_shards": 0}, "num_shards", ">= 1"),
        ({"num_shards": 2, "shard_index": 2}, "shard_index", "must be in 0..1 for num_shards 2"),
        ({"num_proc": 0}, "num_proc", ">= 1"),
        ({"executor": "slurm"}, "executor", "'local', 'ray'"),
        ({"ray_address": "auto"}, "ray_address", "need executor=ray"),
        ({"executor": "ray", "ray_num_gpus": -1}, "ray_num_gpus", "must be >= 0"),
        ({"lock": "relock", "check_speech": False}, "lock", "no num_shards, no check_speech=False"),
        ({"lock": "yes"}, "lock", "'follow', 'relock', 'ignore'"),
        ({"max_skips": -2}, "max_skips", ">= 0"),
        ({"catalogs": "embedded"}, "catalogs", "not one string"),
        ({"catalogs": []}, "catalogs", "at least one"),
        ({"name": ""}, "name", "non-empty"),
        ({"check_speech": "no"}, "check_speech", "True or False"),
    ],
)
def test_config_names_the_bad_field(kw, field, needle):
    with pytest.raises(ConfigError) as e:
        BuildConfig(out="x", **kw)
    assert str(e.value).startswith(field) and needle in str(e.value)
    assert e.value.fields[0].name == field and e.value.exit_code == 2


def test_build_refuses_what_cannot_be_built(tmp_path):
    from casu_dataset import build

    (tmp_path / "file").write_text("x")
    with pytest.raises(ConfigError, match=r"^out .*file: is a file, not a folder"):
        build(BuildConfig(out=tmp_path / "file", check_speech=False))
    with pytest.raises(ConfigError, match=r"^scenarios .*nope: no such file or folder"):
        build(BuildConfig(out=tmp_path / "o", scenarios=tmp_path / "nope", check_speech=False))
    assert not (tmp_path / "o").exists()


def test_cli_names_flags_for_config_fields(tmp_path):
    from casu_dataset.cli import main

    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "casu_dataset",
            "build",
            "--out",
            str(tmp_path / "o"),
            "--num-shards",
            "2",
            "--shard-index",
            "1",
            "--relock",
        ],
        capture_output=True,
        text=True,
    )
    assert run.returncode == 2
    assert run.stderr.strip() == (
        "error: --relock: a lock is made from a whole build with the speech checks "
        "(no --num-shards, no --no-check-speech)"
    )
    assert main(["build", "--out", str(tmp_path / "o"), "--ray-num-gpus", "1"]) == 2


def test_library_errors_name_config_fields_and_the_cli_its_flags(tmp_path):
    """Called from Python, the library names the field (lock=relock, shard_index, out, repo,
    folder); the same error rendered by a command shows the flag the user typed."""
    from casu_dataset.cli.build import flag
    from casu_dataset.cli.common import long_flag
    from casu_dataset.core.errors import BuildError
    from casu_dataset.core.hub import PushError, check_repo_id
    from casu_dataset.dataset.build import shard_of
    from casu_dataset.dataset.publish import plan_push
    from casu_dataset.dataset.writer import FolderWriter
    from casu_dataset.formats.lock import LOCK_FORMAT, LOCK_VERSION, LockError, load_for, lock_path

    lib = tmp_path / "lib.yaml"
    lib.write_text("[]\n")
    header = {"format": LOCK_FORMAT, "version": LOCK_VERSION, "scenes": 0, "library_sha256": "0" * 64}
    lock_path(lib).write_text(json.dumps(header) + "\n")
    with pytest.raises(LockError) as e:
        load_for(lib, {}, {}, [])
    assert "stale lock" in str(e.value) and "build with lock=relock" in str(e.value)
    assert str(e.value).endswith(", or lock=ignore") and "--" not in str(e.value)
    assert e.value.exit_code == 2
    assert e.value.render(flag).endswith("build with --relock to make a new reference, or --no-lock")
    with pytest.raises(ConfigError, match=r"^shard_index 2 must be in \[0, 2\)$") as e:
        shard_of(["a", "b"], 2, 2)
    assert e.value.render(flag).startswith("--shard-index 2 ")
    (tmp_path / "file").write_text("x")
    writer = FolderWriter(tmp_path / "file")
    with pytest.raises(BuildError, match=r"^out .*file: is a file, not a folder$") as e:
        writer._swap()
    assert e.value.render(flag).startswith("--out ") and e.value.exit_code == 1
    with pytest.raises(PushError, match=r"^repo 'x': expected ORG/NAME") as e:
        check_repo_id("x")
    assert e.value.render(long_flag).startswith("--repo 'x': ")
    with pytest.raises(PushError, match=r"^folder .*: not a dataset folder") as e:
        plan_push(tmp_path)
    assert e.value.render(long_flag).startswith(f"--folder {tmp_path}: ")


def test_no_library_error_names_a_flag():
    """Outside cli/, errors name config fields or arguments (a command renders them as flags)."""
    hits = [
        f"{p.relative_to(ROOT)}:{i}"
        for p in sorted((ROOT / "casu_dataset").rglob("*.py"))
        if "cli" not in p.relative_to(ROOT / "casu_dataset").parts
        for i, line in enumerate(p.read_text().splitlines(), 1)
        if re.search(r"Error\(\s*f?[\"']--", line)
    ]
    assert hits == []


IMPORT_CHECK = """
import os, sys
import huggingface_hub.constants as C
env, offline = dict(os.environ), C.HF_HUB_OFFLINE
import casu_dataset, casu_dataset.cli, casu_dataset.api
casu_dataset.BuildConfig, casu_dataset.build
assert dict(os.environ) == env, set(os.environ.items()) ^ set(env.items())
assert C.HF_HUB_OFFLINE is offline
print("unchanged", offline)
"""


@pytest.mark.parametrize("offline", [None, "1"])
def test_imports_change_no_setting(offline):
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    if offline:
        env["HF_HUB_OFFLINE"] = offline
    run = subprocess.run(
        [sys.executable, "-c", IMPORT_CHECK],
        env={**env, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["unchanged", str(bool(offline))]


def test_commands_run_offline_and_restore_the_settings(monkeypatch, tmp_path):
    """A command runs with the Hub offline unless the user chose a mode, and both the environment
    and huggingface_hub's constant are as before once it returns (here: a refused compare)."""
    import huggingface_hub.constants as C

    from casu_dataset.cli import common, main

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setattr(C, "HF_HUB_OFFLINE", False)
    seen = []
    with common.hub_offline():
        seen.append(
            (os.environ.get("HF_HUB_OFFLINE"), os.environ.get("TRANSFORMERS_OFFLINE"), C.HF_HUB_OFFLINE)
        )
    assert seen == [("1", "1", True)]
    before = dict(os.environ)
    assert main(["compare", str(tmp_path), str(tmp_path)]) == 2
    assert dict(os.environ) == before and C.HF_HUB_OFFLINE is False
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")  # the user's choice is left alone
    with common.hub_offline():
        assert os.environ["HF_HUB_OFFLINE"] == "0" and os.environ["TRANSFORMERS_OFFLINE"] == "1"
        assert C.HF_HUB_OFFLINE is False
    assert "TRANSFORMERS_OFFLINE" not in os.environ
