"""`python -m casu_dataset push` as a large-folder upload (huggingface_hub's
upload_folder: several commits, resumable), against a local server that answers as the Hub does
and keeps what was committed. Nothing here touches the network."""

from __future__ import annotations

import json

import pytest
from conftest import call_main
from fake_hub import FakeHub as Hub


@pytest.fixture
def hub(monkeypatch):
    """The client online, and pointed at the local server only."""
    import huggingface_hub.constants as C

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(C, "HF_HUB_OFFLINE", False)
    h = Hub()
    monkeypatch.setattr(C, "ENDPOINT", h.url)
    monkeypatch.setenv("HF_TOKEN", "hf_FAKEtoken1234567890")
    yield h
    h.close()


@pytest.fixture
def folder(tmp_path):
    """A dataset-like folder of 300 small files, a temp file of a killed write and an hf download cache."""
    d = tmp_path / "ds"
    (d / "scenes").mkdir(parents=True)
    (d / "README.md").write_text("---\npretty_name: tiny\n---\n# tiny\n")
    for i in range(300):
        (d / "scenes" / f"s{i:03d}.json").write_text(json.dumps({"i": i}))
    (d / "scenes" / ".s000.json.tmp-host-4242").write_text("half")  # atomic.tmp_path of an unfinished write
    (d / ".cache" / "huggingface").mkdir(parents=True)
    (d / ".cache" / "huggingface" / "x").write_text("download metadata")
    from casu_dataset.formats.build_manifest import identity, write

    write(d, identity(None, {}))  # a build record of these files: push sends a build's files only
    return d


def cli(*argv) -> tuple[int, str, str]:
    from casu_dataset.cli import main

    return call_main(main, argv)


def test_plan_is_the_folder_less_temp_files_and_the_download_cache(folder):
    from casu_dataset.core import atomic
    from casu_dataset.dataset.publish import plan_push

    plan = plan_push(folder)
    expected = sorted(
        p.relative_to(folder).as_posix()
        for p in folder.rglob("*")
        if p.is_file() and not atomic.is_tmp(p) and ".cache" not in p.parts
    )
    assert plan == expected and len(plan) == 302 and "casu_build.json" in plan
    assert atomic.is_tmp(folder / "scenes" / ".s000.json.tmp-host-4242")
    rc, out, err = cli("push", "--repo", "me/tiny", "--folder", str(folder), "--dry_run")
    assert rc == 0, err
    assert "302 files" in out and "private" in out
    assert [line.strip() for line in out.splitlines()[1:]] == plan


def test_push_commits_the_plan_in_several_commits_privately_and_resumes(folder, hub):
    from casu_dataset.dataset.publish import plan_push

    rc, out, err = cli("push", "--repo", "me/tiny", "--folder", str(folder))
    assert rc == 0, err
    create = json.loads(next(r for r in hub.requests if r["path"] == "/api/repos/create")["body"])
    assert create["type"] == "dataset" and create["name"] == "tiny" and create.get("visibility") == "private"
    assert len(hub.commits) >= 2, hub.commits  # a large folder goes in batches, not one commit
    sent = [p for c in hub.commits for p in c]
    assert sorted(sent) == plan_push(folder) and len(sent) == len(set(sent))
    assert "pushed 302 files" in out and "private" in out
    # a re-run resumes: every file is already there with the same content, so nothing is committed again
    n = len(hub.commits)
    rc, out, err = cli("push", "--repo", "me/tiny", "--folder", str(folder))
    assert rc == 0, err
    assert len(hub.commits) == n
    # one file changed since its build: refused by name, nothing sent
    (folder / "scenes" / "s007.json").write_text("changed")
    rc, out, err = cli("push", "--repo", "me/tiny", "--folder", str(folder))
    assert rc == 2 and "scenes/s007.json" in err and len(hub.commits) == n


def test_a_refused_commit_is_retried_in_smaller_batches(folder, hub):
    """The pipeline's adaptive batches: a commit the Hub refuses is split and sent again."""
    from casu_dataset.dataset.publish import plan_push, push

    hub.fail_commits = 1
    push(folder, "me/tiny", token="hf_FAKEtoken1234567890")
    assert sorted(p for c in hub.commits for p in c) == plan_push(folder)
    assert max(len(c) for c in hub.commits) < 250 and len(hub.commits) >= 3


def test_hub_failures_and_bad_inputs_are_one_line(folder, tmp_path, monkeypatch):
    import huggingface_hub.constants as C

    monkeypatch.setenv("HF_TOKEN", "hf_FAKEtoken1234567890")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # the user's own offline setting is kept
    monkeypatch.setattr(C, "HF_HUB_OFFLINE", True)
    rc, out, err = cli("push", "--repo", "me/tiny", "--folder", str(folder))
    assert rc == 5 and len(err.strip().splitlines()) == 1 and "--repo me/tiny" in err and "offline" in err
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setattr(C, "HF_HUB_OFFLINE", False)
    h = Hub(status=403)
    monkeypatch.setattr(C, "ENDPOINT", h.url)
    try:
        rc, out, err = cli("push", "--repo", "me/tiny", "--folder", str(folder))
    finally:
        h.close()
    assert rc == 5 and len(err.strip().splitlines()) == 1 and "403" in err and "hf_FAKE" not in err, err
    rc, _, err = cli("push", "--repo", "noslash", "--folder", str(folder))
    assert rc == 2 and "--repo 'noslash'" in err
    rc, _, err = cli("push", "--repo", "me/tiny", "--folder", str(tmp_path / "nothing"))
    assert rc == 2 and "--folder" in err and "not a dataset folder" in err
    rc, _, err = cli("push", "--repo", "me/tiny", "--folder", str(folder), "--public", "--private")
    assert rc == 2 and "not allowed with" in err


def test_the_command_goes_online_by_itself(folder, tmp_path):
    """`python -m casu_dataset` defaults to offline for reading; `push` alone goes online (here:
    to the local server through HF_ENDPOINT) unless the user set HF_HUB_OFFLINE."""
    import os
    import subprocess
    import sys

    h = Hub()
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    env.update(HF_ENDPOINT=h.url, HF_TOKEN="hf_FAKEtoken1234567890", HF_HOME=str(tmp_path / "hf"))
    try:
        p = subprocess.run(
            [
                sys.executable,
                "-m",
                "casu_dataset",
                "push",
                "--repo",
                "me/tiny",
                "--folder",
                str(folder),
                "--public",
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        h.close()
    assert p.returncode == 0, p.stderr
    assert len(h.commits) >= 2 and "public" in p.stdout
    create = json.loads(next(r for r in h.requests if r["path"] == "/api/repos/create")["body"])
    assert create.get("visibility") == "public"
