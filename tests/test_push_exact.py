"""`python -m casu_dataset push` sends exactly the files the build record lists, verified first:
a stray file, a symlink (to a file or a folder outside the build, or a link as the folder
itself's content), a bit-flipped shard, an empty card or no record are each refused with one
line naming `--folder` and the file, for the dry run and the real push alike, and nothing is sent."""

import json
import shutil

import pytest
from conftest import call_main


def cli(*argv):
    from casu_dataset.cli import main

    return call_main(main, argv)


@pytest.fixture
def build(casu_small, tmp_path):
    d = tmp_path / "ds"
    shutil.copytree(casu_small, d, symlinks=True)
    return d


def _flip(p):
    b = bytearray(p.read_bytes())
    b[len(b) // 2] ^= 0x01
    p.write_bytes(bytes(b))


def _record_files(d):
    return sorted([*json.loads((d / "casu_build.json").read_text())["files"], "casu_build.json"])


def test_dry_run_lists_exactly_the_record(build, tmp_path):
    (build / ".hidden_notes").write_text("not data")  # hidden: never a build file, never sent
    rc, out, err = cli("push", "--repo", "me/casu", "--folder", str(build), "--dry_run")
    assert rc == 0, err
    listed = [x.strip() for x in out.splitlines()[1:]]
    assert listed == _record_files(build) and ".hidden_notes" not in listed
    link = tmp_path / "link_to_build"  # --folder itself a link: the build it points to
    link.symlink_to(build)
    rc, out2, err = cli("push", "--repo", "me/casu", "--folder", str(link), "--dry_run")
    assert rc == 0 and out2.splitlines()[1:] == out.splitlines()[1:], err


CASES = {
    "stray secret.env": lambda d, t: (d / "secret.env").write_text("HF_TOKEN=hf_abc"),
    "symlink to /etc/passwd": lambda d, t: (d / "passwd").symlink_to("/etc/passwd"),
    "config folder linked outside": lambda d, t: (
        shutil.move(str(d / "role_inference"), str(t / "outside")),
        (d / "role_inference").symlink_to(t / "outside"),
    ),
    "bit-flipped shard": lambda d, t: _flip(next((d / "contextual_reasoning").glob("*.parquet"))),
    "empty card": lambda d, t: (d / "README.md").write_text(""),
    "no build record": lambda d, t: (d / "casu_build.json").unlink(),
    "edited record": lambda d, t: (d / "casu_build.json").write_text("{}"),
}
NAMED = {
    "stray secret.env": "secret.env",
    "symlink to /etc/passwd": "passwd",
    "config folder linked outside": "role_inference",
    "bit-flipped shard": "contextual_reasoning/test-",
    "empty card": "README.md",
    "no build record": "casu_build.json",
    "edited record": "casu_build.json",
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_folder_that_is_not_exactly_its_build_is_refused(build, tmp_path, case, monkeypatch):
    from casu_dataset.dataset import publish

    CASES[case](build, tmp_path)
    sent = []
    monkeypatch.setattr(publish, "upload_files", lambda *a, **k: sent.append(a))
    for extra in (["--dry_run"], []):
        rc, out, err = cli("push", "--repo", "me/casu", "--folder", str(build), *extra)
        lines = err.strip().splitlines()
        assert rc == 2 and len(lines) == 1, (case, err)
        assert f"--folder {build}" in lines[0] and NAMED[case] in lines[0], (case, err)
        assert "would upload" not in out
    assert sent == []
