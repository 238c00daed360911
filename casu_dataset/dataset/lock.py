"""The realization lock: every decision a build made, and what it produced, so that any machine
builds the same dataset.

A library (a folder of family YAML files) ships `realization.lock.jsonl` beside its files: a
header line (format, the library's sha256, the build settings, the machine it was made on)
and one line per scene holding the reference build's annotation (voices, retrieved clips with
their source hashes, the timeline in samples, every gain, the speech-check outcomes), each
turn's length and PCM hash, and each stem's FLAC hash and loudness. Whisper and retrieval are
never run when a lock is followed: their outputs depend on the CPU's kernels.

`build` follows the lock when the library has one: sources are the locked clips (checked by
hash), TTS output (Piper runs on onnxruntime, which has no instruction-set override) is
conformed to the locked sample count, and the scene is rendered from the locked plan and
gains, so decisions, timelines, questions and keys are identical by construction. Each scene is
then reported as `reproduced` (all four stems hash-equal to the reference) or `drifted`, with
the loudness difference of each drifted stem and how many samples the TTS output was padded or
cut. A drift beyond DRIFT_LIMITS fails the scene with the numbers. A new or edited library gets
its lock from `build --relock`; a lock whose library or settings changed is a LockError naming
what changed.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from casu_dataset.core.audio_io import array_sha256
from casu_dataset.core.errors import Field, FieldError
from casu_dataset.core.parquet_files import describe_read_error, read_parquet

LOCK_FORMAT = "casu-realization-lock"
LOCK_VERSION = 1
LOCK_NAME = "realization.lock.jsonl"
STEMS = ("mixture", "background", "speech", "events")
# A followed lock tolerates this much machine drift (measured on this project's CPUs: 0 samples
# and 0 LU; a TTS engine that says something else entirely exceeds both by far).
DRIFT_LIMITS = {"turn_samples": 800, "stem_lu": 0.5}
# A followed lock keeps the reference's anti-clipping gain, set on the reference's own peak (at
# the mix config's limit, 0.98): a drift inside DRIFT_LIMITS may raise that peak, which is fine
# until a sample would clip in the FLAC encoder.
FULL_SCALE = 1.0
# The settings a lock was made under; a build under others would not be the reference data.
LOCKED_SETTINGS = ("seed", "alpha", "embedding_model", "catalog_fingerprint", "dataset_version", "mix_config")


class LockError(FieldError, ValueError):
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


# ------------------------------------------------------------------ following a lock


@dataclass
class Drift:
    """How one scene of a locked build compares with the reference."""

    scene_id: str
    status: str = "reproduced"  # or "drifted"
    stems: dict = field(default_factory=dict)  # drifted stem -> {"lufs_diff": LU}
    turns: list = field(default_factory=list)  # per turn: samples padded (+) or cut (-), pcm equal

    def to_dict(self) -> dict:
        return {"scene_id": self.scene_id, "status": self.status, "stems": self.stems, "turns": self.turns}


def conform_length(x: np.ndarray, n: int) -> np.ndarray:
    """TTS output cut or zero-padded at its end to the locked length (its tail is silence)."""
    if x.shape[0] >= n:
        return x[:n]
    return np.concatenate([x, np.zeros(n - x.shape[0], dtype=np.float32)])


def realize_locked(scene, entry: dict, builder) -> tuple[dict, dict[str, bytes], Drift]:
    """One scene from its lock entry: (annotation, FLAC stems, drift). The annotation is the
    reference's, verbatim: every decision in it is the one this build followed."""
    import time

    from casu_dataset.core.audio_io import encode_flac
    from casu_dataset.mix.mixer import Clip, MixConfig, SceneSources, SourceRef, render_scene

    timings = builder.timings
    t0 = time.perf_counter()
    ann = entry["annotation"]
    sid = scene.script.id
    where = f"scene {sid}"
    if ann.get("script") != scene.script.to_dict():
        raise LockError(
            f"{where}: the script differs from the locked one (library edited without ", RELOCK, ")"
        )
    cfg = MixConfig.model_validate(ann["mix_config"])
    cache, catalog = builder.cache, builder.retriever.catalog

    def bank(rec: dict, what: str) -> tuple[SourceRef, Clip]:
        try:
            clip = catalog[rec["clip_id"]]
        except KeyError:
            raise LockError(
                f"{where}: {what}: locked clip {rec['clip_id']} is not in catalog {catalog.name}"
            ) from None
        c = cache.get(clip.path, None)
        if c.sha256 != rec["sha256"]:
            raise LockError(
                f"{where}: {what}: clip {rec['clip_id']} differs from the locked recording "
                f"(sha256 {c.sha256[:12]} != {rec['sha256'][:12]})"
            )
        return SourceRef(clip.path, rec["clip_id"]), c

    bg_ref, bg = bank(ann["background"], "background")
    ev = [bank(e, f"events[{j}]") for j, e in enumerate(ann["events"])]
    voices = ann["extra"]["speech"]["voices"]
    drift = Drift(sid)
    turn_refs, turn_clips = [], []
    for i, (t, locked) in enumerate(zip(ann["turns"], entry["turns"])):
        vid = voices[t["speaker"]]["id"]
        if vid not in builder.registry:
            raise LockError(
                f"{where}: turns[{i}]: locked voice {vid} is not available here "
                f"(install its engine: see README, set-up)"
            )
        path = builder.synth.synthesize(t["text"], builder.registry[vid], f"{where} turns[{i}]")
        x = cache.get(str(path)).audio
        delta = locked["samples"] - x.shape[0]
        if abs(delta) > DRIFT_LIMITS["turn_samples"]:
            raise LockError(
                f"{where}: turns[{i}] ({vid}): the TTS gave {x.shape[0]} samples, the lock "
                f"{locked['samples']} (|diff| > {DRIFT_LIMITS['turn_samples']}): not the same speech"
            )
        x = conform_length(x, locked["samples"])
        same = array_sha256(x) == locked["pcm_sha256"]
        drift.turns.append({"padded": int(delta), "pcm_equal": same})
        turn_refs.append(SourceRef(str(path), t["clip_id"]))
        turn_clips.append(Clip(audio=x, sha256=t["sha256"], lufs=0.0))
    t1 = time.perf_counter()
    sources = SceneSources(bg_ref, turn_refs, [r for r, _ in ev])
    # Keyed by position, not path: two turns may share a file, each conformed alike.
    clips = {
        bg_ref.path: bg,
        **{r.path: c for r, c in ev},
        **{r.path: c for r, c in zip(turn_refs, turn_clips)},
    }
    try:
        mixture, stems, _ = render_scene(
            ann["plan"],
            sources,
            clips,
            cfg,
            ann["gains"],
            cache,
            clip_gain=ann["gains"]["clip_gain"],
            peak_ceiling=FULL_SCALE,
        )
    except ValueError as err:
        pads = [t["padded"] for t in drift.turns]
        raise LockError(
            f"{where}: {err} (full scale): the sources drifted beyond what the locked gain has room "
            f"for (turn samples padded/cut: {pads}, PCM equal: {[t['pcm_equal'] for t in drift.turns]})"
        ) from None
    t2 = time.perf_counter()
    flac = {"mixture": encode_flac(mixture), **{k: encode_flac(v) for k, v in stems.items()}}
    t3 = time.perf_counter()
    for k in STEMS:
        if hashlib.sha256(flac[k]).hexdigest() != entry["stems"][k]["sha256"]:
            d = stem_lufs(flac[k]) - entry["stems"][k]["lufs"]
            if abs(d) > DRIFT_LIMITS["stem_lu"]:
                raise LockError(
                    f"{where}: {k} stem is {d:+.2f} LU from the reference (limit "
                    f"{DRIFT_LIMITS['stem_lu']} LU)"
                )
            drift.stems[k] = {"lufs_diff": round(d, 4)}
    drift.status = "drifted" if drift.stems else "reproduced"
    for k, v in (
        ("sources+tts", t1 - t0),
        ("render", t2 - t1),
        ("flac", t3 - t2),
        ("drift check", time.perf_counter() - t3),
    ):
        timings[k] = timings.get(k, 0.0) + v
    return ann, flac, drift


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
        from casu_dataset.dataset.reader import BuiltDataset

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
