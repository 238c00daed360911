"""A build never deletes what CASU did not write: `--out` over a folder of the user's own files is
refused by name (CLI, API, merge, a direct build_dataset), before any work and with every file
left as it was; an empty folder or an earlier build is replaced; a symlinked `--out` is built at
its target, the link kept and nothing left beside either."""

import os
from pathlib import Path

import pytest
from conftest import build_small
from helpers import cli_process

from casu_dataset import BuildConfig, build
from casu_dataset.core.errors import CasuError
from casu_dataset.dataset.config import ConfigError


def _user_folder(d: Path) -> dict[str, bytes]:
    d.mkdir(parents=True)
    (d / "thesis.tex").write_text("three years of work")
    (d / "figures").mkdir()
    (d / "figures" / "plot.png").write_bytes(b"\x89PNG")
    return _snapshot(d)


def _snapshot(d: Path) -> dict[str, bytes]:
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


def test_build_refuses_a_folder_of_the_users_files_from_api_and_cli(tmp_path):
    mine = tmp_path / "mine"
    before = _user_folder(mine)
    with pytest.raises(
        ConfigError, match=r"^out .*mine: holds files that are not a CASU build: figures, thesis.tex"
    ):
        build(BuildConfig(out=mine, check_speech=False))
    run = cli_process("casu_dataset", "build", "--out", mine, "--no-check-speech", timeout=300)
    assert run.returncode == 2, run.stderr
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and "--out" in lines[0] and "not a CASU build" in lines[0], run.stderr
    # through a symlink the real target is named
    link = tmp_path / "link"
    link.symlink_to(mine)
    with pytest.raises(ConfigError, match=r"the link's target .*mine\)"):
        build(BuildConfig(out=link, check_speech=False))
    assert _snapshot(mine) == before and link.is_symlink()
    assert not [p for p in tmp_path.iterdir() if ".tmp-" in p.name]


def test_merge_refuses_a_folder_of_the_users_files(tmp_path):
    from casu_dataset.cli import main

    mine = tmp_path / "mine"
    before = _user_folder(mine)
    assert main(["merge", "--out", str(mine), str(tmp_path / "s0"), str(tmp_path / "s1")]) == 2
    assert _snapshot(mine) == before


def test_build_into_a_link_builds_the_target_and_keeps_the_link(tmp_path, session_cache):
    """`build_dataset` (below the API's checks) into a symlink: the target gets the build, the
    link stays a link; a second build replaces the earlier build there; a folder of the user's
    files is refused even this far down."""
    from casu_dataset.formats.build_manifest import verify

    target = tmp_path / "data" / "casu"
    target.mkdir(parents=True)  # empty: may be replaced
    link = tmp_path / "link"
    link.symlink_to(target)
    build_small(link, tmp_path / "lib")
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert (target / "casu_build.json").is_file()
    verify(target)
    first = _snapshot(target)
    build_small(link, tmp_path / "lib")  # an earlier build: replaced, same bytes
    assert _snapshot(target) == first and link.is_symlink()
    leftovers = [p for d in (tmp_path, tmp_path / "data") for p in d.iterdir() if ".tmp-" in p.name]
    assert leftovers == []
    mine = tmp_path / "mine"
    before = _user_folder(mine)
    with pytest.raises(CasuError, match="holds files that are not a CASU build"):
        build_small(mine, tmp_path / "lib")
    assert _snapshot(mine) == before
