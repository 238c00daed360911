"""One build per folder: the commit record every reader checks.

A build writes `casu_build.json` into the folder it stages: the dataset identity (the lock it
followed and the sha256 of each config's parquet files) and the sha256 and size of every file
of the build. The staged folder then replaces the old one in one atomic swap (writer.FolderWriter).
Readers (`verify`) refuse a folder holding a file the build did not write (a stray or copied
parquet file) or a file that is not the one it wrote (a config copied from another build),
naming the file. A folder without the record (built by a CASU that wrote none, or by hand) is
read as it is; `identity` is then None.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from pathlib import Path

from casu_dataset.core.audio_io import file_sha256
from casu_dataset.core.content_key import content_key
from casu_dataset.core.errors import InputError

MANIFEST = "casu_build.json"
MANIFEST_FORMAT = "casu-build"
MANIFEST_VERSION = 1


class MixedFolderError(InputError, ValueError):
    """A dataset folder holding files of more than one build; the message names the file."""


def _members(root: Path) -> list[Path]:
    """Every visible file of the folder (hidden files and folders, e.g. `.cache/`, are not data)."""
    return sorted(
        p
        for p in root.rglob("*")
        if p.is_file()
        and p.name != MANIFEST
        and not any(part.startswith(".") for part in p.relative_to(root).parts)
    )


def identity(lock: dict | None, configs: dict[str, str]) -> dict:
    """What makes two dataset folders the same data: the lock followed and the config hashes."""
    body = {"lock_sha256": (lock or {}).get("sha256"), "configs": dict(sorted(configs.items()))}
    return {**body, "sha256": content_key(body)}


def file_hashes(root: Path, known: dict[str, str] | None = None) -> dict[str, str]:
    """sha256 of every visible file of the folder, by path relative to it; `known` (path ->
    sha256) spares re-reading files hashed as they were written."""
    known = known or {}
    return {
        rel: known.get(rel) or file_sha256(p)
        for rel, p in ((p.relative_to(root).as_posix(), p) for p in _members(root))
    }


def config_hashes(shas: dict[str, str], configs: Iterable[str]) -> dict[str, str]:
    """sha256 over each config's parquet files (names and file hashes, in name order), from
    `file_hashes`: the files are read once for these and for the record."""
    out = {}
    for c in configs:
        h = hashlib.sha256()
        for rel in sorted(
            r for r in shas if r.startswith(c + "/") and r.count("/") == 1 and r.endswith(".parquet")
        ):
            h.update(rel.split("/", 1)[1].encode() + b"\0" + bytes.fromhex(shas[rel]))
        out[c] = h.hexdigest()
    return out


def write(root: Path, ident: dict, known: dict[str, str] | None = None) -> dict:
    """Write the record of every file in `root`; `known` (path -> sha256) spares re-reading files
    already hashed (file_hashes) that have not changed since."""
    files = {
        rel: {"sha256": sha, "bytes": (root / rel).stat().st_size}
        for rel, sha in file_hashes(root, known).items()
    }
    record = {"format": MANIFEST_FORMAT, "version": MANIFEST_VERSION, "identity": ident, "files": files}
    (root / MANIFEST).write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
    return record


def read(root: Path) -> dict | None:
    p = Path(root) / MANIFEST
    if not p.is_file():
        return None
    try:
        record = json.loads(p.read_text())
        if record.get("format") != MANIFEST_FORMAT or not isinstance(record.get("files"), dict):
            raise ValueError("not a casu-build record")
        if not isinstance(record.get("identity"), dict) or not all(
            isinstance(m, dict) and isinstance(m.get("sha256"), str) for m in record["files"].values()
        ):
            raise ValueError("its identity or file list is malformed")
    except (OSError, UnicodeDecodeError, ValueError) as err:
        raise MixedFolderError(f"{p}: unreadable build record ({err}); rebuild the folder") from None
    lie = _identity_lie(record)
    if lie:
        raise MixedFolderError(
            f"{p}: the record does not check out: {lie}; it was edited: rebuild the folder"
        )
    return record


def _identity_lie(record: dict) -> str | None:
    """What in the record's identity disagrees with the rest of the record (None: it checks out):
    each config hash is recomputed from the listed files' hashes (which readers check against the
    bytes they read), and the identity hash from its body, so a rewritten identity is refused."""
    ident = record["identity"]
    configs = ident.get("configs")
    if not isinstance(configs, dict):
        return "identity.configs is missing"
    shas = {rel: m["sha256"] for rel, m in record["files"].items()}
    again = config_hashes(shas, configs)
    for c in sorted(configs):
        if configs[c] != again[c]:
            return f"identity.configs.{c} is not the hash of the {c} files it lists"
    if ident.get("sha256") != identity({"sha256": ident.get("lock_sha256")}, configs)["sha256"]:
        return "identity.sha256 is not the hash of the identity's own content"
    return None


def verify(root: Path, read_hashes: dict[str, str] | None = None, full: bool = False) -> dict | None:
    """The folder's build record after checking that every file belongs to that build: no file
    the build did not write, none missing, every size as written, and the sha256 of each file in
    `read_hashes` (relative path -> sha256 of the bytes a reader just read) or, with `full`, of
    every file. Raises MixedFolderError naming the first file that does not belong."""
    root = Path(root)
    record = read(root)
    if record is None:
        return None
    build = record["identity"].get("sha256", "?")[:16]
    files = record["files"]
    present = {p.relative_to(root).as_posix(): p for p in _members(root)}
    for rel in sorted(set(present) - set(files)):
        raise MixedFolderError(
            f"{root / rel}: not part of build {build} (not in {MANIFEST}): a copy, a link or "
            "a file of another build; remove it or rebuild the folder"
        )
    for rel, meta in sorted(files.items()):
        p = present.get(rel)
        if p is None:
            raise MixedFolderError(
                f"{root / rel}: missing: build {build} wrote it ({MANIFEST}); rebuild the folder"
            )
        if p.is_symlink() or p.stat().st_size != meta["bytes"]:
            raise MixedFolderError(
                f"{root / rel}: not the file build {build} wrote (size or link differs): "
                "the folder mixes two builds; rebuild it"
            )
        sha = (read_hashes or {}).get(rel) or (
            file_sha256(p) if full or rel.endswith((".md", ".json", ".yaml")) else None
        )
        if sha is not None:
            check_file(root, record, rel, sha)
    return record


def check_file(root: Path, record: dict | None, rel: str, sha: str) -> None:
    """That the bytes a reader just read (their sha256) are the file the build wrote at `rel`
    (a folder verified once, then each file checked as it is read). No record: nothing to check."""
    if record is None:
        return
    build = record["identity"].get("sha256", "?")[:16]
    meta = record["files"].get(rel)
    if meta is None:
        raise MixedFolderError(
            f"{Path(root) / rel}: not part of build {build} (not in {MANIFEST}): a copy, a link "
            "or a file of another build; remove it or rebuild the folder"
        )
    if sha != meta["sha256"]:
        raise MixedFolderError(
            f"{Path(root) / rel}: not the file build {build} wrote (sha256 {sha[:12]} != "
            f"{meta['sha256'][:12]}): the folder mixes two builds; rebuild it"
        )
