"""Atomic file writes and clean-up of temp files left by killed writers.

A file is written under a hidden temp name in its own folder (same file system, so the rename
is atomic) and `os.replace`d into place: a reader sees the old file or the new one, never a
truncated one. A writer killed before the rename leaves its temp behind; `clean_stale` removes
those whose writer process is gone (or that are older than `max_age`, for a cache shared by
several machines where the PID means nothing here).
"""
from __future__ import annotations

import contextlib
import os
import re
import shutil
import time
from pathlib import Path

STALE_AGE_S = 6 * 3600  # no single write takes hours: an older temp is stale whatever its PID
_TMP_RE = re.compile(r"^\..+\.tmp(\d+)$")
TMP_GLOB = ".*.tmp[0-9]*"  # the same names as a glob, for upload_folder's ignore patterns


def tmp_path(path: Path) -> Path:
    """`.NAME.tmpPID` beside `path`: hidden, so dataset readers (pyarrow, datasets) skip it."""
    path = Path(path)
    return path.with_name(f".{path.name}.tmp{os.getpid()}")


def is_tmp(path: Path) -> bool:
    return _TMP_RE.match(Path(path).name) is not None


@contextlib.contextmanager
def atomic_open(path: str | Path, mode: str = "w", tmp: Path | None = None):
    """Open a temp file (default `tmp_path(path)`); on a clean exit it is flushed, synced and
    renamed to `path`; on an exception it is removed, leaving the old `path` as it was."""
    path = Path(path)
    tmp = tmp or tmp_path(path)
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


def is_stale(path: Path, pid: int, max_age: float = STALE_AGE_S, now: float | None = None) -> bool:
    if pid == os.getpid():
        return False
    try:
        age = (now or time.time()) - path.lstat().st_mtime
    except FileNotFoundError:
        return False
    return age > max_age or not pid_alive(pid)


def clean_stale(paths, pid_of, max_age: float = STALE_AGE_S) -> list[Path]:
    """Remove each path (file or folder) in `paths` whose writer is gone; `pid_of(path)` gives
    the writer's PID or None for a path that is not a temp. Returns what was removed."""
    removed = []
    for p in paths:
        pid = pid_of(p)
        if pid is None or not is_stale(p, pid, max_age):
            continue
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p, ignore_errors=True)
        else:
            p.unlink(missing_ok=True)
        removed.append(p)
    return removed


def tmp_pid(path: Path) -> int | None:
    """The PID in a `tmp_path` name, else None."""
    m = _TMP_RE.match(Path(path).name)
    return int(m.group(1)) if m else None


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


def fsync_tree(root: Path) -> None:
    """Flush every file and folder under `root` to disk (before it is swapped into place)."""
    for d, _, files in os.walk(root):
        for name in [*files, "."]:
            fd = os.open(os.path.join(d, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
