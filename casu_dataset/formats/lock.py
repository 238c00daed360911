"""The realization lock: every decision a build made, and what it produced, so that any machine
builds the same dataset.

A library (a folder of family YAML files) ships `realization.lock.jsonl` beside its files: a
header line (format, the library's sha256, the build settings, the machine it was made on)
and one line per scene holding the reference build's annotation (voices, retrieved clips with
their source hashes, the timeline in samples, every gain, the speech-check outcomes), each
turn's length and PCM hash, and each stem's FLAC hash and loudness. Whisper and retrieval are
never run when a lock is followed: their outputs depend on the CPU's kernels.

`build` follows the lock when the library has one (mix/realize_locked.py): sources are the
locked clips (checked by hash), TTS output (Piper runs on onnxruntime, which has no
instruction-set override) is conformed to the locked sample count, and the scene is rendered
from the locked plan and gains, so decisions, timelines, questions and keys are identical by
construction. Each scene is then reported as `reproduced` (all four stems hash-equal to the
reference) or `drifted`, with the loudness difference of each drifted stem and how many samples
the TTS output was padded or cut. A drift beyond DRIFT_LIMITS fails the scene with the numbers.
A new or edited library gets its lock from `build --relock`; a lock whose library or settings
changed is a LockError naming what changed.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from casu_dataset.core.audio_io import array_sha256
from casu_dataset.core.errors import Field, FieldError, InputError
from casu_dataset.core.parquet_files import describe_read_error, read_parquet

LOCK_FORMAT = "casu-realization-lock"
LOCK_VERSION = 1
LOCK_NAME = "realization.lock.jsonl"
STEMS = ("mixture", "background", "speech", "events")
# A followed lock tolerates this much machine drift (measured on this project's CPUs: 0 samples
# and 0 LU; a TTS engine that says something else entirely exceeds both by far).
DRIFT_LIMITS = {"turn_samples": 800, "stem_lu": 0.5}
# The settings a lock was made under; a build under others would not be the reference data.
LOCKED_SETTINGS = ("seed", "alpha", "embedding_model", "catalog_fingerprint", "dataset_version", "mix_config")


class LockError(InputError, FieldError, ValueError):
    """A lock that cannot be followed: stale, for other settings, unreadable, or a drift beyond
    DRIFT_LIMITS. The message names the lock file and what differs, and the BuildConfig lock
    mode that gets past it (the CLI shows its flag)."""


RELOCK, NO_LOCK = Field("lock", "relock"), Field("lock", "ignore")


def library_files(lib: Path) -> list[Path]:
    lib = Path(lib)
    if lib.is_file():
        return [lib]
    return sorted(p for p in lib.iterdir() if p.is_file() and p.suffix in (".yaml", ".yml", ".json"))


def library_sha256(lib: Path) -> str:
    """sha256 over the library's family files (names and bytes): what the lock was made for."""
    h = hashlib.sha256()
    for f in library_files(lib):
        h.update(f.name.encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()


def lock_name(realization: int = 1) -> str:
    """`realization.lock.jsonl`, and `realization2.lock.jsonl` for the second realization."""
    return LOCK_NAME if realization == 1 else LOCK_NAME.replace("realization", f"realization{realization}", 1)


def lock_path(lib: Path, realization: int = 1) -> Path:
    lib = Path(lib)
    name = lock_name(realization)
    return lib / name if lib.is_dir() else lib.with_name(lib.stem + "." + name)


def locked_settings(settings: dict, mix_config: dict) -> dict:
    return {**{k: settings[k] for k in LOCKED_SETTINGS if k != "mix_config"}, "mix_config": mix_config}


def stem_lufs(flac: bytes) -> float:
    from casu_dataset.core.audio_io import decode_bytes
    from casu_dataset.core.loudness import gated_lufs, kweight

    x = decode_bytes(flac)
    return round(gated_lufs(kweight(x, 16000), 16000), 4)


@dataclass
class Lock:
    path: Path
    header: dict
    scenes: dict[str, dict]
    sha256: str

    @property
    def short(self) -> str:
        return self.sha256[:16]

    @property
    def skipped(self) -> dict[str, str]:
        """scene id -> reason, for the scenes the reference build could not build (a realization-2
        lock only: a layer with no other recording of its type, a mixture that cannot fit
        realization 1's gain). A build that follows the lock skips them with that reason."""
        return {s["scene_id"]: s["reason"] for s in self.header.get("skipped", [])}

    def entry(self, scene_id: str) -> dict:
        try:
            return self.scenes[scene_id]
        except KeyError:
            raise LockError(
                f"{self.path}: no entry for scene {scene_id} (the library has scenes the lock "
                "does not; rebuild with ",
                RELOCK,
                ")",
            ) from None


def read_lock(path: Path) -> Lock:
    path = Path(path)
    try:
        raw = path.read_bytes()
        lines = raw.decode("utf-8").splitlines()
        header = json.loads(lines[0])
        scenes = {}
        for i, line in enumerate(lines[1:], start=2):
            e = json.loads(line)
            scenes[e["scene_id"]] = e
    except (OSError, UnicodeDecodeError, IndexError, KeyError, TypeError, json.JSONDecodeError) as err:
        raise LockError(f"{path}: unreadable lock ({type(err).__name__}: {err})") from None
    if header.get("format") != LOCK_FORMAT or header.get("version") != LOCK_VERSION:
        raise LockError(f"{path}: not a version-{LOCK_VERSION} {LOCK_FORMAT} file")
    if header.get("scenes") != len(scenes):
        raise LockError(
            f"{path}: header says {header.get('scenes')} scenes, the file has {len(scenes)} "
            "(truncated or edited by hand; rebuild with ",
            RELOCK,
            ")",
        )
    return Lock(path, header, scenes, hashlib.sha256(raw).hexdigest())


def load_for(
    lib: Path,
    settings: dict,
    mix_config: dict,
    scene_ids: list[str],
    realization: int = 1,
    reference: Lock | None = None,
) -> Lock | None:
    """The library's lock (of `realization`), checked against the library and the build settings;
    None if it has none. A realization-2 lock also names the realization-1 lock it was made against:
    `reference` (realization 1's lock now, or None) must be that one."""
    p = lock_path(lib, realization)
    if not p.is_file():
        return None
    lock = read_lock(p)
    relock = RELOCK if realization == 1 else (RELOCK, " with ", Field("realization", str(realization)))
    if lock.header.get("realization", 1) != realization:
        raise LockError(
            f"{p}: a lock of realization {lock.header.get('realization', 1)}, not {realization}; build with ",
            *_flat(relock),
        )
    if realization != 1:
        want_ref = reference.sha256 if reference is not None else None
        if lock.header.get("reference_lock_sha256") != want_ref:
            raise LockError(
                f"{p}: stale lock: made against realization 1's lock "
                f"{str(lock.header.get('reference_lock_sha256'))[:16]}, which is now "
                f"{str(want_ref)[:16]} (realization 1 changed); build with ",
                *_flat(relock),
            )
    sha = library_sha256(lib)
    if lock.header.get("library_sha256") != sha:
        raise LockError(
            f"{p}: stale lock: made for library sha256 {str(lock.header.get('library_sha256'))[:16]}, "
            f"the library at {lib} is now {sha[:16]} (a family file changed); build with ",
            *_flat(relock),
            " to make a new reference, or ",
            NO_LOCK,
        )
    want = locked_settings(settings, mix_config)
    for k, v in want.items():
        got = lock.header["settings"].get(k)
        if got != v:
            raise LockError(
                f"{p}: the lock was made with {k}={json.dumps(got)[:80]}, this build has "
                f"{json.dumps(v)[:80]}; build with the locked settings, ",
                *_flat(relock),
                ", or ",
                NO_LOCK,
            )
    missing = sorted(set(scene_ids) - set(lock.scenes) - set(lock.skipped))
    if missing:
        raise LockError(
            f"{p}: no entry for {len(missing)} scene(s) of the library (first: {missing[0]}); build with ",
            *_flat(relock),
        )
    return lock


def _flat(x) -> tuple:
    return x if isinstance(x, tuple) else (x,)


def scene_entry(scene_id: str, annotation: dict, flac: dict[str, bytes], turn_pcm: list[np.ndarray]) -> dict:
    return {
        "scene_id": scene_id,
        "annotation": annotation,
        "turns": [{"samples": int(x.shape[0]), "pcm_sha256": array_sha256(x)} for x in turn_pcm],
        "stems": {
            k: {"sha256": hashlib.sha256(flac[k]).hexdigest(), "lufs": stem_lufs(flac[k])} for k in STEMS
        },
    }


def write_lock(
    lib: Path,
    entries: list[dict],
    settings: dict,
    mix_config: dict,
    configs: dict[str, str],
    realization: int = 1,
    reference: Lock | None = None,
    skipped: list[dict] | None = None,
) -> Lock:
    """Write the lock for `lib` atomically; `configs`: config name -> sha256 of its parquet files.
    Realization 2's lock (its own file) also records the realization-1 lock it was made against
    (`reference`; None: realization 1 was decided in the same build) and the scenes the build
    skipped, with their reasons (`skipped`: [{scene_id, reason}]), so it still covers the whole
    library. A realization-1 lock never has skips: every scene of the library is in it."""
    if skipped and realization == 1:
        raise ValueError("a realization-1 lock covers every scene of the library: it records no skips")
    from casu_dataset.core import atomic
    from casu_dataset.core.isa import describe

    header = {
        "format": LOCK_FORMAT,
        "version": LOCK_VERSION,
        "library_sha256": library_sha256(lib),
        "settings": locked_settings(settings, mix_config),
        "scenes": len(entries),
        "configs": dict(sorted(configs.items())),
        "made_on": describe(),
    }
    if realization != 1:
        header["realization"] = realization
        header["reference_lock_sha256"] = reference.sha256 if reference is not None else None
        header["skipped"] = sorted(
            ({"scene_id": x["scene_id"], "reason": x["reason"]} for x in skipped or []),
            key=lambda x: x["scene_id"],
        )
    lines = [json.dumps(header, sort_keys=True)]
    lines += [
        json.dumps(e, sort_keys=True, separators=(",", ":"))
        for e in sorted(entries, key=lambda e: e["scene_id"])
    ]
    p = lock_path(lib, realization)
    atomic.write_text(p, "\n".join(lines) + "\n")
    return read_lock(p)


def conform_length(x: np.ndarray, n: int) -> np.ndarray:
    """TTS output cut or zero-padded at its end to the locked length (its tail is silence)."""
    if x.shape[0] >= n:
        return x[:n]
    return np.concatenate([x, np.zeros(n - x.shape[0], dtype=np.float32)])


def drift_summary(drifts: list[dict]) -> dict:
    """Counts for the card and build_report.json."""
    drifted = [d for d in drifts if d["status"] == "drifted"]
    lu = [abs(s["lufs_diff"]) for d in drifted for s in d["stems"].values()]
    pads = [abs(t["padded"]) for d in drifts for t in d["turns"]]
    return {
        "scenes": len(drifts),
        "reproduced": len(drifts) - len(drifted),
        "drifted": len(drifted),
        "max_stem_lufs_diff": max(lu, default=0.0),
        "max_turn_samples_conformed": max(pads, default=0),
        "drifted_scenes": sorted(d["scene_id"] for d in drifted),
    }


def compare_folders(a: Path, b: Path) -> list[dict]:
    """Per scene and stem, how build `b` differs from reference build `a` (same library): equal, or
    the largest sample difference in dB re. full scale and the loudness difference."""

    from casu_dataset.core.audio_io import decode_bytes
    from casu_dataset.core.loudness import gated_lufs, kweight

    def stems(root: Path) -> dict[str, dict[str, bytes | None]]:
        from casu_dataset.formats.reader import BuiltDataset

        BuiltDataset(root).verify()  # a folder mixing builds, or an edited record: LoadError naming the file
        out = {}
        for f in sorted((Path(root) / "scenes").glob("*.parquet")):
            try:
                rows = read_parquet(
                    str(f), columns=["scene_id", *("audio" if k == "mixture" else k for k in STEMS)]
                ).to_pylist()
            except (OSError, ValueError, KeyError) as err:  # pyarrow's errors are OSError/ValueError
                raise LockError(f"{f}: not a readable scenes file ({describe_read_error(err)})") from None
            for r in rows:
                out[r["scene_id"]] = {
                    k: (r["audio" if k == "mixture" else k] or {}).get("bytes") for k in STEMS
                }
        return out

    ra, rb = stems(a), stems(b)
    if set(ra) != set(rb):
        raise LockError(f"{a} and {b} hold different scenes ({len(set(ra) ^ set(rb))} differ)")
    rows = []
    for sid in sorted(ra):
        for k in STEMS:
            if ra[sid][k] == rb[sid][k]:
                rows.append({"scene_id": sid, "stem": k, "equal": True})
                continue
            xa = decode_bytes(ra[sid][k] or b"", f"{a}: scene {sid} {k}")
            xb = decode_bytes(rb[sid][k] or b"", f"{b}: scene {sid} {k}")
            if xa.shape != xb.shape:
                rows.append(
                    {
                        "scene_id": sid,
                        "stem": k,
                        "equal": False,
                        "length_diff": int(xb.shape[0] - xa.shape[0]),
                    }
                )
                continue
            m = float(np.max(np.abs(xa.astype(np.float64) - xb)))
            rows.append(
                {
                    "scene_id": sid,
                    "stem": k,
                    "equal": False,
                    "max_diff_db": round(20 * np.log10(m), 2) if m > 0 else None,
                    "lufs_diff": round(
                        gated_lufs(kweight(xb, 16000), 16000) - gated_lufs(kweight(xa, 16000), 16000), 4
                    ),
                }
            )
    return rows
