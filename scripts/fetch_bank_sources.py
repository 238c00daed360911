"""Cut added sound-bank sources from Debian `main` packages (the clips listed in a CSV).

Run once by a maintainer on a Debian system with apt (`python scripts/fetch_bank_sources.py
[LIST] [OUT]`); LIST defaults to scripts/bank_sources_added.csv, OUT to
../shared/soundbank-sources-added. OUT gets the layout of shared/soundbank-sources that
scripts/build_bank.py reads: `clips/KIND__TYPE__CLIP.ogg` (mono, 22.05 kHz, Ogg Vorbis, at
most 120 s), `mapping.csv` and `copyright/PACKAGE.txt` (the package's Debian copyright file).
Then `python scripts/build_bank.py --add OUT` appends them to casu_dataset/sounds/bank/.

Optional columns (older lists without them work unchanged): `author` (see COLUMNS),
`start_s` / `end_s` (cut the clip to that span of the source file, in seconds, e.g. a bed
trimmed to 30 s), and a path of the form `CONTAINER.zip:inner/path` (or `CONTAINER.pk3:...`)
reads `inner/path` from that zip archive inside the package. Set FETCH_BANK_WORK to a folder to
keep the unpacked packages there between runs (default: a temporary folder).
"""

from __future__ import annotations

import csv
import gzip
import io
import os
import re
import subprocess
import sys
import tempfile
import zipfile
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


def copyright_text(tree: Path, pkg: str) -> str:
    p = tree / "usr" / "share" / "doc" / pkg / "copyright"
    if not p.exists():
        raise SystemExit(f"{pkg}: no usr/share/doc/{pkg}/copyright in the package")
    data = p.read_bytes()
    return (gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data).decode("utf-8", "replace")


def read_audio(tree: Path, path: str, missing: str) -> tuple[np.ndarray, int]:
    """(samples, rate) of PATH in the unpacked package; `CONTAINER.zip:inner` (or `.pk3:`, a zip
    under another name) reads `inner` from that archive in the package."""
    m = re.match(r"^(.+?\.(?:zip|pk3)):(.+)$", path)
    if m:
        zpath, inner = tree / m.group(1), m.group(2)
        if not zpath.exists():
            raise SystemExit(missing)
        with zipfile.ZipFile(zpath) as z:
            try:
                data = z.read(inner)
            except KeyError:
                raise SystemExit(missing) from None
        return sf.read(io.BytesIO(data), dtype="float32", always_2d=True)
    src = tree / path
    if not src.exists():
        raise SystemExit(missing)
    return sf.read(str(src), dtype="float32", always_2d=True)


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
            x, sr = read_audio(tree, path, f"{list_path}: {r['clip']}: {path} is not in {pkg}")
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
