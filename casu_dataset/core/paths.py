"""One rule for outputs: a command never writes where it reads. An output path that equals,
contains or lies inside an input (a library, a dataset, a cache, a bank) is refused before any
work, naming both, since writing it would replace or pollute the input."""

from __future__ import annotations

from pathlib import Path

from casu_dataset.core.errors import InputError


def _real(p) -> Path:
    return Path(p).expanduser().resolve(strict=False)


WHY = ": writing there would replace or pollute an input; write somewhere else"


def collision(
    outputs: dict[str, object], inputs: dict[str, object]
) -> tuple[str, object, str, str, object] | None:
    """The first clash between an output and an input, as (output key, output path, "is" /
    "contains" / "lies inside", input key, input path), or None; keys are flags or field names.
    Empty values are skipped."""
    for out_key, out in outputs.items():
        try:
            o = _real(out) if out else None
        except (OSError, RuntimeError):  # a symlink loop: the output check names it
            o = None
        if o is None:
            continue
        for in_key, inp in inputs.items():
            try:
                i = _real(inp) if inp else None
            except (OSError, RuntimeError):
                i = None
            if i is None:
                continue
            if o == i:
                rel = "is"
            elif i.is_relative_to(o):
                rel = "contains"
            elif o.is_relative_to(i):
                rel = "lies inside"
            else:
                continue
            return out_key, out, rel, in_key, inp
    return None


def describe(clash: tuple[str, object, str, str, object]) -> str:
    """A clash in one line, its keys shown as given (flags)."""
    out_key, out, rel, in_key, inp = clash
    return f"{out_key} {out} {rel} {in_key} {inp}{WHY}"


# -- what a path is: one check for every file or folder a command reads or writes -----------------

#: The most a configuration or task file may hold: these are small hand-written texts, and reading
#: more (`--config /dev/zero`, a log given by mistake) would only fill the memory.
MAX_TEXT_BYTES = 1 << 20


class PathError(InputError, ValueError):
    """A path a command cannot use: the message starts with what names it (a flag, a field,
    a file) and says what the path is instead."""


def _kind(mode: int) -> str:
    import stat

    if stat.S_ISFIFO(mode):
        return "a named pipe (FIFO)"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISREG(mode):
        return "a file"
    return "not a regular file or folder"


def _is_loop(err: BaseException) -> bool:
    import errno

    return (isinstance(err, RuntimeError) and "loop" in str(err).lower()) or (
        isinstance(err, OSError) and err.errno == errno.ELOOP
    )


def real_path(path, what: str) -> Path:
    """`path` with every symlink resolved, the target allowed not to exist yet (an output); a symlink
    loop anywhere on it is named (PathError)."""
    try:
        return Path(path).expanduser().resolve(strict=False)
    except (OSError, RuntimeError) as err:
        if _is_loop(err):
            raise PathError(f"{what}: a symbolic link loop (a link that leads back to itself)") from None
        raise PathError(f"{what}: cannot resolve it ({getattr(err, 'strerror', None) or err})") from None


def input_path(path, what: str, kind: str = "file") -> Path:
    """The real path of something a command reads: symlinks resolved, and it must exist and be a
    regular file (kind "file"), a folder ("folder") or either ("any"); a FIFO, a device or a socket
    (which would block the read or never end), a symlink loop and a dangling link are each named in
    one line starting with `what` (PathError: exit 2). Returns the resolved path."""
    import os

    p = Path(path).expanduser()
    real = real_path(p, what)
    try:
        st = os.stat(real)
    except FileNotFoundError:
        if os.path.islink(p):
            raise PathError(f"{what}: a symbolic link to {os.readlink(p)}, which does not exist") from None
        raise PathError(f"{what}: no such {'folder' if kind == 'folder' else 'file'}") from None
    except OSError as err:
        if _is_loop(err):
            raise PathError(f"{what}: a symbolic link loop (a link that leads back to itself)") from None
        raise PathError(f"{what}: cannot read it ({err.strerror})") from None
    found = _kind(st.st_mode)
    wanted = {"file": ("a file",), "folder": ("a folder",), "any": ("a file", "a folder")}[kind]
    if found not in wanted:
        link = f" (a link to {real})" if real != p.absolute() else ""
        need = {"file": "a regular file", "folder": "a folder", "any": "a regular file or a folder"}[kind]
        raise PathError(f"{what}: is {found}{link}, not {need}")
    return real


def read_text(path, what: str, limit: int | None = MAX_TEXT_BYTES) -> str:
    """A small text file read safely: `input_path`'s checks, opened without blocking (a FIFO put in
    its place after the check is refused too), at most `limit` bytes (more is named), UTF-8
    (UnicodeDecodeError passes through for the caller's message)."""
    import os
    import stat

    real = input_path(path, what, "file")
    fd = os.open(real, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))
    with os.fdopen(fd, "rb") as f:
        mode = os.fstat(f.fileno()).st_mode
        if not stat.S_ISREG(mode):
            raise PathError(f"{what}: is {_kind(mode)}, not a regular file")
        blob = f.read(-1 if limit is None else limit + 1)
    if limit is not None and len(blob) > limit:
        raise PathError(
            f"{what}: larger than {limit // (1 << 20) or 1} MiB; a configuration or task file is small "
            "text (is this the right file?)"
        )
    return blob.decode("utf-8")


def output_target(path, what: str, kind: str | None = None) -> Path:
    """The real place an output path names: symlinks resolved; a symlink loop, or a link to a target
    that does not exist (where would the files go?), is named with the target (PathError); with
    `kind` ("file" or "folder"), something else already there (a FIFO, a device, a file for a
    folder) is named too."""
    import os

    p = Path(path).expanduser()
    real = real_path(p, what)
    if os.path.islink(p) and not os.path.exists(p):
        raise PathError(
            f"{what}: a symbolic link to {os.readlink(p)}, which does not exist; create it, or give the "
            "real path"
        )
    if kind is not None and os.path.exists(real):
        found = _kind(os.stat(real).st_mode)
        if found != f"a {kind}":
            link = f" (a link to {real})" if real != p.absolute() else ""
            raise PathError(f"{what}: is {found}{link}, not a {'regular file' if kind == 'file' else kind}")
    return real
