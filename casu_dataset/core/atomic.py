"""Atomic file writes and clean-up of the temps left by killed writers.

A file (or a folder: a scene cache entry, a build's staging folder) is written under a temp
name beside its final path (same file system, so the rename is atomic) and `os.replace`d into
place: a reader sees the old one or the new one, never a truncated one. Every temp in CASU has
one name, `.NAME.tmp-HOST-PID` (`tmp_path`): hidden, so dataset readers (pyarrow, datasets) and
the build record skip it; with its writer's host and PID, so `clean_stale` can tell a live
writer's temp, which it keeps, from a killed one's, which it removes. One rule: a temp is stale
when its writer ran on this host and is gone, or when it is older than `max_age` (another
host's writer, in a folder shared by several machines, can only be judged by age).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import socket
import time
from pathlib import Path

STALE_AGE_S = 6 * 3600  # no single write takes hours: an older temp is stale whatever its writer
TMP_MARK = ".tmp-"
_TMP_RE = re.compile(r"^\.(.+)\.tmp-(.+)-(\d+)$")
TMP_GLOB = f".*{TMP_MARK}*"  # the same names as a glob (upload_folder's ignore patterns, clean-ups)
HOST = socket.gethostname()


def tmp_path(path: Path) -> Path:
    """`.NAME.tmp-HOST-PID` beside `path`."""
    path = Path(path)
    return path.with_name(f".{path.name}{TMP_MARK}{HOST}-{os.getpid()}")


def tmp_owner(path: Path) -> tuple[str, int] | None:
    """(host, PID) of the writer named in a `tmp_path` name, else None."""
    m = _TMP_RE.match(Path(path).name)
    return (m.group(2), int(m.group(3))) if m else None


def is_tmp(path: Path) -> bool:
    return tmp_owner(path) is not None


@contextlib.contextmanager
def atomic_open(path: str | Path, mode: str = "w"):
    """Open `tmp_path(path)`; on a clean exit it is flushed, synced and renamed to `path`; on
    an exception it is removed, leaving the old `path` as it was."""
    path = Path(path)
    tmp = tmp_path(path)
    try:
        with open(tmp, mode) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def write_bytes(path: Path, data: bytes) -> None:
    """Write `data` to `path` atomically (temp file, fsync, rename)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_open(path, "wb") as f:
        f.write(data)


def write_text(path: Path, text: str) -> None:
    write_bytes(path, text.encode("utf-8"))


def pid_alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


def is_stale(path: Path, max_age: float = STALE_AGE_S, now: float | None = None) -> bool:
    """True for a temp whose writer is gone: this host's dead PID, or older than `max_age`."""
    owner = tmp_owner(path)
    if owner is None:
        return False
    host, pid = owner
    if host == HOST and pid == os.getpid():
        return False
    try:
        age = (now or time.time()) - Path(path).lstat().st_mtime
    except FileNotFoundError:
        return False
    return age > max_age or (host == HOST and not pid_alive(pid))


def clean_stale(paths, max_age: float = STALE_AGE_S) -> list[Path]:
    """Remove each stale temp (file or folder) among `paths`; other paths are left alone.
    Returns what was removed."""
    removed = []
    for p in paths:
        p = Path(p)
        if not is_stale(p, max_age):
            continue
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p, ignore_errors=True)
        else:
            p.unlink(missing_ok=True)
        removed.append(p)
    return removed


# ------------------------------------------------------------------ whole-folder swaps

_RENAME_EXCHANGE = 2


def _renameat2():
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        fn = libc.renameat2
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    return fn


def exchange(a: Path, b: Path) -> bool:
    """Swap two existing paths in one atomic step (Linux renameat2 RENAME_EXCHANGE): a reader
    of either path sees the old folder or the new one, never a mix. False where the OS or the
    file system cannot (the caller then falls back to two renames)."""
    import ctypes

    fn = _renameat2()
    if fn is None:
        return False
    at_fdcwd = -100
    if fn(at_fdcwd, os.fsencode(str(a)), at_fdcwd, os.fsencode(str(b)), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (22, 38, 95):  # EINVAL, ENOSYS, EOPNOTSUPP: no exchange here
        return False
    raise OSError(err, os.strerror(err), str(b))


def fsync_path(path: str | Path) -> None:
    """Flush one file (or folder entry list) to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_tree(root: Path) -> None:
    """Flush every file and folder under `root` to disk (before it is swapped into place)."""
    for d, _, files in os.walk(root):
        for name in [*files, "."]:
            fsync_path(os.path.join(d, name))
