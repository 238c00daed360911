"""`push`: a built dataset folder to the Hub, exactly the files its build wrote.

The build record (`casu_build.json`, build_manifest.py) lists every file the build wrote with its
size and sha256. `plan_push` sends those files and the record, nothing else, after checking that
each is a regular file inside the folder (no symlink anywhere on its path: a link could carry
`/etc/passwd` or a folder outside the build), that its bytes are the ones the build wrote (a
flipped bit is named), that no other visible file sits among them (a stray `secret.env`), and that
the card is not empty. `--dry_run` lists exactly this plan.
"""

from __future__ import annotations

import os
from pathlib import Path

from casu_dataset.core.hub import FOLDER, PushError, upload_files
from casu_dataset.formats.build_manifest import MANIFEST, MixedFolderError, verify


def _links(root: Path) -> list[str]:
    """Every symlink in the folder (not followed), by path relative to it; hidden entries too."""
    found = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        for name in [*dirnames, *filenames]:
            p = Path(dirpath) / name
            if p.is_symlink():
                found.append(p.relative_to(root).as_posix())
    return sorted(found)


def plan_push(folder: str | Path) -> list[str]:
    """The exact files (paths relative to `folder`, sorted) that `push` sends: the build record's
    files and the record. PushError naming `--folder` when the folder is not one verified build."""
    given = Path(folder).expanduser()
    if not given.is_dir():
        raise PushError(FOLDER, f" {folder}: not a dataset folder (no such folder)")
    root = given.resolve()  # a link to a build folder is that folder
    if not (root / MANIFEST).is_file():
        raise PushError(
            FOLDER,
            f" {folder}: not a dataset folder (no {MANIFEST} build record: push sends the files a "
            "build wrote, and only them)",
        )
    links = _links(root)
    if links:
        shown = ", ".join(links[:3]) + (f" and {len(links) - 3} more" if len(links) > 3 else "")
        raise PushError(FOLDER, f" {folder}: holds symlinks ({shown}); push follows none: remove them")
    try:
        record = verify(root, full=True)  # every file's size and sha256; no stray visible file
    except MixedFolderError as err:
        raise PushError(FOLDER, f" {folder}: {err}") from None
    assert record is not None  # the record file exists (checked above); verify read it
    card = root / "README.md"
    if "README.md" not in record["files"] or not card.read_text(encoding="utf-8", errors="replace").strip():
        raise PushError(
            FOLDER, f" {folder}: the dataset card README.md is missing or empty; rebuild the folder"
        )
    return sorted([*record["files"], MANIFEST])


def push(
    folder: str | Path,
    repo: str,
    api=None,
    private: bool = True,
    message: str | None = None,
    token: str | None = None,
):
    """Upload the build in `folder` to a Hub dataset repo (private unless `private=False`):
    exactly `plan_push(folder)`, checked first."""
    files = plan_push(folder)
    return upload_files(Path(folder).expanduser().resolve(), repo, files, api, private, message, token)
