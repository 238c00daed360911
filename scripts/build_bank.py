"""Build the embedded sound bank (casu_dataset/sounds/bank/) from shared/soundbank-sources.

Run once by a maintainer (`python scripts/build_bank.py [SOURCES]`); its output is committed.
`python scripts/build_bank.py --add SOURCES` appends another sources folder (made by
scripts/fetch_bank_sources.py) to the committed bank without touching its existing clips.
`python scripts/build_bank.py --labels` rewrites only the labels of the committed clips (caption
and keywords from bank_captions.txt, type from bank_retype.json), never their audio.
Per clip: mono, events trimmed of leading/trailing silence and capped in length, unusable
clips dropped with a reason, the curated caption and keywords from bank_captions.txt, and
author/license from the source package's Debian copyright file.
"""

from __future__ import annotations

import csv
import fnmatch
import json
import re
import shutil
import sys
from pathlib import Path

import numpy as np
import soundfile as sf

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "casu_dataset" / "sounds" / "bank"
MAX_EVENT_S = 12.0  # an "event" longer than this is a bed; keep its start
MAX_BED_S = 60.0  # beds are cut at a seeded offset anyway; 60 s keeps the repo small
MIN_S = 0.2
SILENT_PEAK = 10 ** (-45 / 20)  # peak under -45 dBFS: near-silent
CLIP_LEVEL = 0.999
CLIP_FRACTION = 0.01  # over 1% of samples at full scale: audibly clipped, unusable


def read_captions() -> dict[str, tuple[str, list[str]]]:
    out = {}
    for line in (ROOT / "scripts" / "bank_captions.txt").read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        stem, caption, kws = (p.strip() for p in line.split("|"))
        if stem in out:
            raise SystemExit(f"scripts/bank_captions.txt: {stem} is captioned twice")
        out[stem] = (caption, [k.strip() for k in kws.split(",") if k.strip()])
    return out


def read_retype() -> dict[str, str]:
    """clip id -> type, where a clip's type is not the one its file name carries (a coarse type
    split into sound classes a listener tells apart, e.g. a referee's whistle vs a steam whistle)."""
    p = ROOT / "scripts" / "bank_retype.json"
    return json.loads(p.read_text()) if p.exists() else {}


def parse_copyright(path: Path) -> list[dict]:
    """DEP-5 stanzas (Files, Copyright, License); a non-DEP-5 file becomes one '*' stanza."""
    text = path.read_text(errors="replace")
    stanzas, cur, key = [], {}, None
    for line in text.splitlines():
        if not line.strip():
            if cur:
                stanzas.append(cur)
            cur, key = {}, None
            continue
        m = re.match(r"^([A-Za-z-]+):\s*(.*)$", line)
        if m and not line.startswith((" ", "\t")):
            key = m.group(1).lower()
            cur[key] = m.group(2).strip()
        elif key:
            cur[key] = (cur[key] + "\n" + line.strip()).strip()
    if cur:
        stanzas.append(cur)
    files = [s for s in stanzas if "files" in s]
    if files:
        return files
    m = re.search(r"Copyright[^\n]*\n\s*\n?\s*((?:Copyright|\(c\)|©)[^\n]+)", text, re.I)
    return [{"files": "*", "copyright": m.group(1).strip() if m else "", "license": ""}]


def match_stanza(stanzas: list[dict], path_in_pkg: str) -> dict:
    best, best_len = None, -1
    for s in stanzas:
        for pat in s["files"].split():
            if pat == "*":
                if best_len < 0:
                    best, best_len = s, 0
                continue
            # Debian patterns are relative to the source tree; installed paths carry a prefix.
            if fnmatch.fnmatch(path_in_pkg, "*" + pat.lstrip("./")) and len(pat) > best_len:
                best, best_len = s, len(pat)
    return best or {"copyright": "", "license": ""}


def first_author(copyright_field: str) -> str:
    for line in copyright_field.splitlines():
        line = re.sub(r"^(Copyright\s*)?(\(c\)|©)?\s*", "", line.strip(), flags=re.I)
        line = re.sub(r"^[\d,\s\-–]+", "", line).strip(" ,")
        if line and line.lower() not in ("n/a", "none"):
            return line[:160]
    return ""


def trim_silence(x: np.ndarray, sr: int) -> np.ndarray:
    frame = max(1, int(0.01 * sr))
    n = x.shape[0] // frame
    if n < 2:
        return x
    rms = np.sqrt(np.mean(x[: n * frame].reshape(n, frame) ** 2, axis=1) + 1e-20)
    db = 20 * np.log10(rms)
    thr = max(db.max() - 40.0, -60.0)
    active = np.flatnonzero(db > thr)
    pad = 2
    a = max(0, active[0] - pad) * frame
    b = min(x.shape[0], (active[-1] + 1 + pad) * frame)
    return x[a:b]


def find_row(rows: list[dict], kind: str, typ: str, name: str) -> dict | None:
    """The mapping row of one clip file: by its `clip` column where the mapping has one (added
    sources, whose names may differ from the file name in the package), else by that file name."""
    for r in rows:
        if r["kind"] != kind or r["type"].split(" ")[0] != typ:
            continue
        if (r["clip"] if "clip" in r else Path(r["path_in_package_or_container"]).stem) == name:
            return r
    return None


class Sources:
    """One sources folder (clips/, mapping.csv, copyright/, optional opensfx_meta.json)."""

    def __init__(self, src: Path):
        self.src = src
        if not (src / "mapping.csv").is_file() or not (src / "clips").is_dir():
            raise SystemExit(f"{src}: not a sources folder (needs clips/ and mapping.csv)")
        with open(src / "mapping.csv", newline="") as fh:
            self.rows = list(csv.DictReader(fh))
        meta = src / "opensfx_meta.json"
        self.opensfx = (
            {int(m[0]): (m[1], m[2]) for m in json.loads(meta.read_text())} if meta.exists() else {}
        )
        self.copyright: dict[str, list[dict]] = {}

    def stanzas(self, pkg: str) -> list[dict]:
        if pkg not in self.copyright:
            cf = self.src / "copyright" / f"{pkg}.txt"
            self.copyright[pkg] = parse_copyright(cf) if cf.exists() else []
            # A package's file already in the bank stays as committed (existing clips cite it).
            if cf.exists() and not (OUT / "licenses" / f"{pkg}.txt").exists():
                shutil.copy(cf, OUT / "licenses" / f"{pkg}.txt")
        return self.copyright[pkg]


def build_clip(f: Path, sources: Sources, captions: dict, seen: dict) -> tuple[dict | None, str | None]:
    """(manifest entry, None) for a kept clip, whose audio is written to the bank, or (None, reason)."""
    stem = f.stem
    kind_tag, typ, name = stem.split("__", 2)
    kind = {"ba": "background", "ev": "event"}[kind_tag]
    row = find_row(sources.rows, kind, typ, name)
    if row is None:
        return None, "no row in mapping.csv"
    if stem not in captions:
        raise SystemExit(f"scripts/bank_captions.txt: no caption for {stem}")
    x, sr = sf.read(str(f), dtype="float32", always_2d=True)
    x = x.mean(axis=1)
    if kind == "event":
        x = trim_silence(x, sr)
        if x.shape[0] > MAX_EVENT_S * sr:
            x = x[: int(MAX_EVENT_S * sr)]
            fade = int(0.05 * sr)
            x[-fade:] *= np.linspace(1, 0, fade, dtype=np.float32)
    elif x.shape[0] > MAX_BED_S * sr:
        x = x[: int(MAX_BED_S * sr)]
    dur = x.shape[0] / sr
    peak = float(np.max(np.abs(x))) if x.size else 0.0
    reason = None
    if dur < MIN_S:
        reason = f"shorter than {MIN_S} s after trimming ({dur:.2f} s)"
    elif peak < SILENT_PEAK:
        reason = f"near-silent (peak {20 * np.log10(max(peak, 1e-9)):.1f} dBFS)"
    elif np.mean(np.abs(x) >= CLIP_LEVEL) > CLIP_FRACTION:
        reason = f"clipped ({100 * np.mean(np.abs(x) >= CLIP_LEVEL):.2f}% of samples at full scale)"
    pkg = row["debian_package"]
    # The same recording filed under two types is one clip for retrieval.
    same = (kind, pkg, row["path_in_package_or_container"])
    if reason is None and same in seen:
        reason = f"same source recording as {seen[same]}"
    if reason:
        return None, reason
    seen[same] = stem
    stanza = match_stanza(sources.stanzas(pkg), row["path_in_package_or_container"])
    license_ = row["license_summary"]
    author = first_author(stanza.get("copyright", "")) or None
    title = None
    m = re.match(r"^(\d\d)_", name)
    if (row.get("author") or "").strip():
        # A per-file author documented outside the copyright file (an upstream README): the
        # mapping row then carries that file's own license too.
        author = row["author"].strip()
    elif pkg == "openttd-opensfx" and m and int(m.group(1)) in sources.opensfx:
        title, license_ = sources.opensfx[int(m.group(1))]
    elif stanza.get("license"):
        license_ = stanza["license"].splitlines()[0].strip() or license_
    out_name = f"{stem}.ogg"
    sf.write(str(OUT / "audio" / out_name), x, sr, format="OGG", subtype="VORBIS")
    caption, keywords = captions[stem]
    typ = read_retype().get(stem, typ)
    if not 3 <= len(keywords) <= 8:
        raise SystemExit(f"scripts/bank_captions.txt: {stem}: {len(keywords)} keywords (need 3-8)")
    return {
        "id": stem,
        "kind": kind,
        "type": typ,
        "caption": caption,
        "keywords": keywords,
        "file": f"audio/{out_name}",
        "duration": round(dur, 3),
        "sample_rate": sr,
        "source_package": pkg,
        "source_path": row["path_in_package_or_container"],
        "source_title": title,
        "author": author,
        "license": license_,
        "license_file": f"licenses/{pkg}.txt",
    }, None


def build_clips(
    sources: Sources,
    captions: dict,
    clips: list,
    dropped: list,
    seen: dict,
    skip: frozenset[str] = frozenset(),
) -> None:
    for f in sorted((sources.src / "clips").iterdir()):
        if f.stem in skip:
            continue
        clip, reason = build_clip(f, sources, captions, seen)
        if clip is None:
            dropped.append({"file": f.name, "reason": reason})
        else:
            clips.append(clip)


def main(src: Path) -> None:
    """Rebuild the whole bank from one sources folder (re-encodes every clip)."""
    # The package's own hand-written files survive a rebuild.
    keep = {n: (OUT / n).read_bytes() for n in ("__init__.py", "LICENSE.md") if (OUT / n).exists()}
    if OUT.exists():
        shutil.rmtree(OUT)
    (OUT / "audio").mkdir(parents=True)
    (OUT / "licenses").mkdir()
    for n, data in keep.items():
        (OUT / n).write_bytes(data)
    clips, dropped = [], []
    build_clips(Sources(src), read_captions(), clips, dropped, {})
    write_bank(clips, dropped, dropped)


def relabel() -> None:
    """Rewrite the committed clips' caption, keywords and type from bank_captions.txt and
    bank_retype.json. The audio (and so every built byte that hashes it) is left alone."""
    manifest = json.loads((OUT / "manifest.json").read_text())
    captions, retype = read_captions(), read_retype()
    unknown = sorted(set(retype) - {c["id"] for c in manifest["clips"]})
    if unknown:
        raise SystemExit(f"scripts/bank_retype.json: not a bank clip: {', '.join(unknown)}")
    changed = 0
    for c in manifest["clips"]:
        if c["id"] not in captions:
            raise SystemExit(f"scripts/bank_captions.txt: no caption for {c['id']}")
        caption, keywords = captions[c["id"]]
        if not 3 <= len(keywords) <= 8:
            raise SystemExit(f"scripts/bank_captions.txt: {c['id']}: {len(keywords)} keywords (need 3-8)")
        new = {"type": retype.get(c["id"], c["id"].split("__")[1]), "caption": caption, "keywords": keywords}
        if any(c[k] != v for k, v in new.items()):
            changed += 1
            c.update(new)
    write_bank(manifest["clips"], manifest["dropped"], [])
    print(f"bank: {changed} clips relabelled")


def add(src: Path) -> None:
    """Append the clips of another sources folder to the committed bank. Existing clips, their
    audio bytes and manifest entries are left as they are (a re-encode would change the bytes
    that built datasets hash); clips already in the bank or already dropped are skipped."""
    manifest = json.loads((OUT / "manifest.json").read_text())
    clips, dropped = manifest["clips"], manifest["dropped"]
    seen = {(c["kind"], c["source_package"], c["source_path"]): c["id"] for c in clips}
    skip = frozenset(c["id"] for c in clips) | {Path(d["file"]).stem for d in dropped}
    new_dropped: list[dict] = []
    build_clips(Sources(src), read_captions(), clips, new_dropped, seen, skip)
    write_bank(clips, dropped + new_dropped, new_dropped)


def write_bank(clips: list[dict], dropped: list[dict], report: list[dict]) -> None:
    manifest = {
        "name": "casu-embedded-bank",
        "version": 1,
        "description": "Real recordings from Debian main packages for the CASU embedded sound bank.",
        "num_clips": len(clips),
        "num_dropped": len(dropped),
        "dropped": dropped,
        "clips": clips,
    }
    (OUT / "manifest.json").write_text(json.dumps(manifest, indent=1, ensure_ascii=False))
    write_attribution(clips, dropped)
    print(f"bank: {len(clips)} clips kept, {len(dropped)} dropped -> {OUT}")
    for d in report:
        print(f"  dropped {d['file']}: {d['reason']}")


def write_attribution(clips: list[dict], dropped: list[dict]) -> None:
    lines = [
        "# Attribution for the CASU embedded sound bank",
        "",
        "These recordings come from Debian `main` packages. **The bank is licensed clip by clip under",
        "the licenses below, not under the code's license.** Each package's full Debian copyright",
        "file (authors and license texts) is in `licenses/`. Anything you build from these clips",
        "(a CASU dataset, its audio) must carry this attribution.",
        "",
        f"{len(clips)} clips; {len(dropped)} source clips were dropped (see `manifest.json` `dropped`).",
        "",
        "| clip | source package | path in package | author | license |",
        "| --- | --- | --- | --- | --- |",
    ]
    for c in clips:
        lines.append(
            f"| {c['id']} | {c['source_package']} | {c['source_path']} | "
            f"{(c['author'] or 'see licenses/' + c['source_package'] + '.txt').replace('|', '/')} | "
            f"{c['license'].replace('|', '/')} |"
        )
    (OUT / "ATTRIBUTION.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    args = sys.argv[1:]
    if args[:1] == ["--add"]:
        if len(args) != 2:
            raise SystemExit(
                "usage: build_bank.py --add SOURCES (a folder made by scripts/fetch_bank_sources.py)"
            )
        add(Path(args[1]))
    elif args == ["--labels"]:
        relabel()
    else:
        main(Path(args[0]) if args else ROOT.parent / "shared" / "soundbank-sources")
