"""Does the audio carry each family's cue? Measured on a built dataset, from the stems.

A contrast family's key assumes a listener hears its slot (the varied event, or the varied
background) as the fill describes it. Three checks, per variant, from the audio as mixed:

- audibility: an event cue's loudest 100 ms frame inside its window, K-weighted, against speech +
  background (+ other events) in that same frame; a background cue's 90th-percentile frame against
  the rest. Below AUDIBLE_DB the cue fails. 3 dB: identification of environmental sounds in noise
  falls steeply as the signal-to-noise ratio approaches 0 dB (Gygi & Shafiro 2011 found
  identification in babble far below its quiet level at 0 dB and near chance well below it), so
  a cue must stand at least 3 dB above everything else in its best frame.
- truth: the similarity between the fill's description and the retrieved clip's own captions
  (the retrieval's desc_sim, MiniLM cosine); below TRUE_MIN the clip does not say what the fill
  says (the wrong recording for the key), between TRUE_MIN and TRUE_READ it is listed for an
  honest reader.
- distinctness: the fills of one family as mixed, as 32 log-spaced band levels (mean and spread
  over 50 ms frames, dB); two fills closer than DISTINCT_MIN_DB (RMS over the bands) sound alike.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict, deque
from concurrent.futures import Future
from pathlib import Path

import numpy as np

AUDIBLE_DB = 3.0
TRUE_MIN = 0.5
TRUE_READ = 0.7
DISTINCT_MIN_DB = 3.0
SR = 16000
FRAME = 1600  # 100 ms
HOP = 800


def _frames_db(x: np.ndarray, weighted: bool = True) -> np.ndarray:
    """K-weighted (or plain) energy per 100 ms frame (50 ms hop), dB."""
    from casu_dataset.core.loudness import kweight

    k = (kweight(x, SR) if weighted else np.asarray(x)).astype(np.float64) ** 2
    if k.shape[0] < FRAME:
        k = np.pad(k, (0, FRAME - k.shape[0]))
    c = np.concatenate([[0.0], np.cumsum(k)])
    starts = np.arange(0, k.shape[0] - FRAME + 1, HOP)
    e = (c[starts + FRAME] - c[starts]) / FRAME
    return 10 * np.log10(np.maximum(e, 1e-20))


def _cue_event(ann: dict) -> tuple[int, int, int]:
    """An event cue's index in the script and its window [lo, hi) in samples."""
    j = next(i for i, e in enumerate(ann["script"]["events"]) if e.get("window"))
    ev = ann["plan"]["events"][j]
    return j, ev["onset_samples"], ev["onset_samples"] + ev["length_samples"]


def audibility(stems: dict[str, np.ndarray], ann: dict, slot_kind: str, weighted: bool = True) -> float:
    """dB of the cue over the rest in its best frame (see the module docstring). K-weighted by
    default (the ear's sensitivity: a phone's ring stands out of speech and a bed more than its
    plain level says); `weighted=False` gives the plain level ratio, reported beside it."""
    if slot_kind == "event":
        _, lo, hi = _cue_event(ann)
        cue = _frames_db(stems["events"][lo:hi], weighted)
        rest = _frames_db(stems["speech"][lo:hi] + stems["background"][lo:hi], weighted)
        i = int(np.argmax(cue))
        return round(float(cue[i] - rest[i]), 2)
    cue = _frames_db(stems["background"], weighted)
    rest = _frames_db(stems["speech"] + stems["events"], weighted)
    return round(float(np.percentile(cue - rest, 90)), 2)


def band_profile(x: np.ndarray) -> np.ndarray:
    """Mean and spread of 32 log-spaced band levels (100 Hz - 8 kHz, dB) over 50 ms frames."""
    n = 1024
    if x.shape[0] < n:
        x = np.pad(x, (0, n - x.shape[0]))
    idx = np.arange(0, x.shape[0] - n + 1, 800)
    spec = np.abs(np.fft.rfft(np.stack([x[i : i + n] for i in idx]) * np.hanning(n), axis=1)) ** 2
    freqs = np.fft.rfftfreq(n, 1 / SR)
    edges = np.geomspace(100, 8000, 33)
    bands = np.stack(
        [spec[:, (freqs >= lo) & (freqs < hi)].sum(axis=1) for lo, hi in zip(edges[:-1], edges[1:])], 1
    )
    db = 10 * np.log10(np.maximum(bands, 1e-12))
    active = db.max(axis=1) > db.max() - 40  # frames where the cue sounds, not its silent tail
    db = db[active] if active.any() else db
    return np.concatenate([db.mean(axis=0), db.std(axis=0)])


def cue_audio(stems: dict[str, np.ndarray], ann: dict, slot_kind: str) -> np.ndarray:
    if slot_kind == "event":
        _, lo, hi = _cue_event(ann)
        return stems["events"][lo:hi]
    return stems["background"]


def _measure(r: dict, with_profile: bool) -> tuple[dict, np.ndarray | None]:
    """One variant's cue row (and its fill's band profile when asked), from its parquet row."""
    from casu_dataset.core.audio_io import decode_bytes

    ann = json.loads(r["annotation"])
    kind = r["slot_kind"]
    stop = None
    if kind == "event":
        # An event cue is judged inside its window: the stems are decoded up to its end only.
        j, _, stop = _cue_event(ann)
        m = ann["extra"]["retrieval"]["events"][j]
        desc = ann["script"]["events"][j]["description"]
    else:
        m = ann["extra"]["retrieval"]["background"]
        desc = ann["script"]["background"]["description"]
    stems = {
        k: decode_bytes(r[k]["bytes"], f"{r['scene_id']} {k}", stop=stop)
        for k in ("background", "speech", "events")
    }
    row = {
        "scene_id": r["scene_id"],
        "family_id": r["family_id"],
        "fill": r["fill"],
        "kind": kind,
        "clip_id": m["clip_id"],
        "description": desc,
        "caption": m["caption"],
        "truth": round(float(m["desc_sim"]), 4),
        "audibility_db": audibility(stems, ann, kind),
        "audibility_plain_db": audibility(stems, ann, kind, weighted=False),
    }
    return row, band_profile(cue_audio(stems, ann, kind)) if with_profile else None


def measure_rows(rows: list[dict]) -> dict[str, tuple[dict, np.ndarray | None]]:
    """The cue of each family row among `rows` (scenes-config rows, in build order), with the band
    profile of the first variant of each (family, fill): what CueMeter would measure for them. A
    build worker measures the unit it built (a family is one unit, so its variants arrive
    together and in this order), where the stems are, instead of the driver decoding them again."""
    out: dict[str, tuple[dict, np.ndarray | None]] = {}
    seen: set[tuple[str, str]] = set()
    for r in rows:
        if not r.get("family_id"):
            continue
        key = (r["family_id"], r["fill"])
        out[r["scene_id"]] = _measure(r, key not in seen)
        seen.add(key)
    return out


class CueMeter:
    """Measures the variants' cues as their rows arrive, `threads` rows at a time (default: one
    per core; FLAC decoding and filtering release the GIL), and collects them in arrival order, so
    the result does not depend on the thread count. A build's FolderWriter feeds it each scene row
    as it writes it (the stems as written, measured while the folder is still being written);
    `check_folder` feeds it a built folder's rows. At most `max_pending` rows wait, so memory holds
    a bounded number of stems."""

    def __init__(self, threads: int | None = None, max_pending: int = 32):
        from concurrent.futures import ThreadPoolExecutor

        self._pool = ThreadPoolExecutor(max(1, threads or os.cpu_count() or 1), thread_name_prefix="cues")
        self._max_pending = max_pending
        self._pending: deque = deque()
        self._rows: list[dict] = []
        self._profiles: defaultdict[str, dict] = defaultdict(dict)

    def add(self, r: dict, measured: tuple[dict, np.ndarray | None] | None = None) -> None:
        """One row of the scenes config (rows without a family carry no cue and are passed over).
        `measured`: what `measure_rows` gave for it in a build worker (the same numbers from the
        same bytes), used unless this row must give its fill's profile and it has none."""
        if not r.get("family_id"):
            return
        # The first variant of each (family, fill) in arrival order gives the fill's profile.
        fills = self._profiles[r["family_id"]]
        first = r["fill"] not in fills
        fills.setdefault(r["fill"], None)
        if measured is not None and (measured[1] is not None or not first):
            done: Future = Future()
            done.set_result(measured)
            self._pending.append((r["family_id"], r["fill"], first, done))
        else:
            self._pending.append((r["family_id"], r["fill"], first, self._pool.submit(_measure, r, first)))
        while len(self._pending) > self._max_pending:
            self._collect_one()

    def _collect_one(self) -> None:
        fam, fill, first, fut = self._pending.popleft()
        row, prof = fut.result()
        self._rows.append(row)
        if first:
            self._profiles[fam][fill] = (row["clip_id"], prof)

    def result(self) -> dict:
        """Per-variant cue rows and per-family distinctness pairs, with counts."""
        while self._pending:
            self._collect_one()
        self.close()
        pairs = []
        for fam, fills in sorted(self._profiles.items()):
            names = sorted(fills)
            for i, a in enumerate(names):
                for b in names[i + 1 :]:
                    d = float(np.sqrt(np.mean((fills[a][1] - fills[b][1]) ** 2)))
                    pairs.append(
                        {
                            "family_id": fam,
                            "fills": [a, b],
                            "clips": [fills[a][0], fills[b][0]],
                            "distance_db": round(d, 2),
                        }
                    )
        return {"cues": self._rows, "pairs": pairs, "summary": summary(self._rows, pairs)}

    def close(self) -> None:
        """Stop measuring (rows not started are dropped)."""
        self._pool.shutdown(wait=True, cancel_futures=True)


def check_folder(folder: str | Path, threads: int | None = None) -> dict:
    """Per-variant cue rows and per-family distinctness pairs of a built dataset, with counts."""
    from casu_dataset.core.errors import LoadError
    from casu_dataset.core.parquet_files import row_groups

    cols = ["scene_id", "family_id", "slot_kind", "fill", "background", "speech", "events", "annotation"]
    meter = CueMeter(threads)
    try:
        for f in sorted((Path(folder) / "scenes").glob("*.parquet")):
            unreadable = lambda why: LoadError(f"{f}: not a readable scenes file ({why})")  # noqa: E731
            for rows in row_groups(f, cols, unreadable):
                for r in rows:
                    meter.add(r)
        return meter.result()
    finally:
        meter.close()


def summary(rows: list[dict], pairs: list[dict]) -> dict:
    aud = [r["audibility_db"] for r in rows]
    return {
        "cues": len(rows),
        "families": len({r["family_id"] for r in rows}),
        "inaudible": sorted({(r["family_id"], r["fill"]) for r in rows if r["audibility_db"] < AUDIBLE_DB}),
        "audibility_median_db": round(float(np.median(aud)), 2) if aud else None,
        "plain_below_0db": sorted(
            {(r["family_id"], r["fill"]) for r in rows if r.get("audibility_plain_db", 99) < 0}
        ),
        "untrue": sorted({(r["family_id"], r["fill"]) for r in rows if r["truth"] < TRUE_MIN}),
        "to_read": sorted({(r["family_id"], r["fill"]) for r in rows if TRUE_MIN <= r["truth"] < TRUE_READ}),
        "alike": [(p["family_id"], *p["fills"]) for p in pairs if p["distance_db"] < DISTINCT_MIN_DB],
        "pairs": len(pairs),
    }


def failures(s: dict) -> list[str]:
    """The cue failures as violation lines (validity --strict-cues)."""
    return (
        [
            f"family {f}: fill {x}: cue below {AUDIBLE_DB:g} dB over the rest (inaudible)"
            for f, x in s["inaudible"]
        ]
        + [
            f"family {f}: fill {x}: clip captions do not match the fill (similarity < {TRUE_MIN:g})"
            for f, x in s["untrue"]
        ]
        + [
            f"family {f}: fills {a} and {b} sound alike (< {DISTINCT_MIN_DB:g} dB apart)"
            for f, a, b in s["alike"]
        ]
    )


def format_summary(s: dict) -> str:
    lines = [
        f"cue checks: {s['cues']} cues in {s['families']} families, {s['pairs']} fill pairs",
        f"- audibility (>= {AUDIBLE_DB:g} dB over the rest in the cue's best frame): {len(s['inaudible'])} "
        f"fail; median {s['audibility_median_db']} dB; {len(s.get('plain_below_0db', []))} below 0 dB "
        "unweighted",
        f"- truth (fill description vs the clip's captions, MiniLM cosine): {len(s['untrue'])} below "
        f"{TRUE_MIN:g} (fail), {len(s['to_read'])} in [{TRUE_MIN:g}, {TRUE_READ:g}) (for an honest reader)",
        f"- distinctness (fills of a family >= {DISTINCT_MIN_DB:g} dB apart in band levels): "
        f"{len(s['alike'])} pairs sound alike",
    ]
    for what, items in (("inaudible", s["inaudible"]), ("untrue", s["untrue"]), ("alike", s["alike"])):
        lines += [f"  {what}: " + " ".join("/".join(map(str, i)) for i in items)] if items else []
    return "\n".join(lines)
