"""Time-aligned composition (paper, Stage 3): A(t) = background + shifted speech + shifted events.

`compose` draws every free parameter from the seed, resolves the timeline, sets each layer's
loudness and returns the mixture, one stem per layer and an annotation that holds the full
spec. `regenerate` (regenerate.py) rebuilds the same bytes from that annotation and the source
files alone, as scaper does from its JAMS file. Both share `render_scene`, so they cannot drift
apart.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from casu_dataset import __version__
from casu_dataset.contract import ANNOTATION_FORMAT, ANNOTATION_VERSION
from casu_dataset.core.audio_io import SAMPLE_RATE, AudioError, file_sha256, write_wav
from casu_dataset.core.loudness import (
    BLOCK_S,
    PYLOUDNORM_VERSION,
    RunningEnergy,
    db_to_gain,
    gated_lufs,
    kweight,
    merged_spans,
    peak_abs,
)
from casu_dataset.core.rng import derive_rng
from casu_dataset.script.schema import SceneScript
from casu_dataset.script.timeline import Timeline, TimingConfig, resolve

LAYERS = ("background", "speech", "events")


class MixConfig(BaseModel):
    """Every knob of the mixer; stored whole in each annotation."""

    model_config = ConfigDict(extra="forbid")
    sample_rate: int = SAMPLE_RATE
    background_lufs: float = -35.0  # the reference level
    speech_snr_db: tuple[float, float] = (10.0, 16.0)  # speech layer re. background
    event_snr_db: tuple[float, float] = (6.0, 14.0)  # event layer re. background
    peak_limit: float = Field(default=0.98, gt=0.0, le=1.0)
    crossfade_s: float = 0.5  # when a short bed loops
    fade_s: float = 0.05  # bed edges and cut events
    fixed_duration: float | None = None  # None: fit the content (<= 30 s)
    timing: dict = Field(default_factory=dict)  # overrides of TimingConfig fields

    def timing_config(self) -> TimingConfig:
        cfg = TimingConfig()
        for k, v in self.timing.items():
            if not hasattr(cfg, k):
                raise ValueError(f"mix config timing.{k}: unknown field")
            setattr(cfg, k, tuple(v) if isinstance(v, list) else v)
        return cfg


@dataclass
class SourceRef:
    """One audio file feeding a layer."""

    path: str
    clip_id: str


@dataclass
class SceneSources:
    background: SourceRef
    turns: list[SourceRef]
    events: list[SourceRef]


@dataclass
class Clip:
    audio: np.ndarray  # mono float32 at the mix rate
    sha256: str
    lufs: float


class ClipCache:
    """Decoded, resampled clips and their loudness, shared across the scenes of a batch.

    A bank clip is read once per process however many scenes use it; a changed file
    (size or mtime) is read again."""

    def __init__(self, sr: int = SAMPLE_RATE, max_items: int = 4096):
        self.sr = sr
        self.max_items = max_items
        self._clips: dict[tuple, Clip] = {}
        self._kw: dict[tuple, np.ndarray] = {}
        self._energy: dict[tuple, RunningEnergy] = {}

    def get(self, path: str, kind: str | None = None) -> Clip:
        """The clip, DC removed; AudioError naming the file if it is unusable (silent, too short
        for `kind`, unreadable, ...), so no scene applies a huge gain to a degenerate source."""
        from casu_dataset.sounds.source_check import load_source

        p = Path(path)
        try:
            st = p.stat()
        except OSError:
            raise AudioError(f"{path}: audio file not found") from None
        # The file's identity (device, inode) instead of its resolved path: the same key for
        # every path or link to one file, without a resolve() per clip and scene.
        key = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, kind)
        clip = self._clips.get(key)
        if clip is None:
            audio, lufs = load_source(p, self.sr, kind)
            clip = self._put(self._clips, key, Clip(audio=audio, sha256=file_sha256(p), lufs=lufs))
        return clip

    def kweighted(self, sha: str, audio: np.ndarray, tag: str) -> np.ndarray:
        """K-weighted copy of a placed clip, keyed by content and the cut applied to it."""
        key = (sha, tag, audio.shape[0])
        kw = self._kw.get(key)
        if kw is None:
            kw = self._put(self._kw, key, kweight(audio, self.sr))
        return kw

    def running_energy(self, sha: str, kw: np.ndarray, tag: str) -> RunningEnergy:
        """The running energy of a K-weighted clip (`kweighted`'s result), for the loudness of
        any window of it."""
        key = (sha, tag, kw.shape[0])
        e = self._energy.get(key)
        if e is None:
            e = self._put(self._energy, key, RunningEnergy(kw))
        return e

    def _put(self, store: dict, key: tuple, value):
        """Insert into one of the caches, dropping its oldest entry at max_items."""
        if len(store) >= self.max_items:
            store.pop(next(iter(store)))
        store[key] = value
        return value


@dataclass
class MixResult:
    mixture: np.ndarray
    stems: dict[str, np.ndarray]
    annotation: dict = field(default_factory=dict)

    def write(self, out_dir: str | Path, stems: bool = True) -> Path:
        """mixture.wav, stems/{layer}.wav and annotation.json under out_dir/scene_id."""
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        sr = self.annotation["sample_rate"]
        write_wav(out / "mixture.wav", self.mixture, sr)
        if stems:
            for name, x in self.stems.items():
                write_wav(out / "stems" / f"{name}.wav", x, sr)
        # Compact JSON: the C encoder is ~10x faster than indent= for a per-scene file.
        (out / "annotation.json").write_text(json.dumps(self.annotation, separators=(",", ":")))
        return out


def scene_rng(seed: int, scene_id: str) -> np.random.Generator:
    # One independent stream per (seed, scene): a scene's draws do not depend on which
    # other scenes are in the batch or in what order they are built.
    return derive_rng(seed, scene_id)


def _equal_power_loop(x: np.ndarray, n: int, xf: int) -> np.ndarray:
    """Repeat x to n samples, joining copies with an equal-power crossfade of xf samples."""
    xf = max(1, min(xf, x.shape[0] // 4))
    t = np.linspace(0.0, np.pi / 2, xf, dtype=np.float64)
    # Scalar libm, not numpy's vectorised sin/cos: their AVX-512 (SVML) loops differ from the
    # AVX2 ones in the last bit, and these curves are part of the stems' bytes.
    fin = np.array([math.sin(v) for v in t], dtype=np.float64).astype(np.float32)
    fout = np.array([math.cos(v) for v in t], dtype=np.float64).astype(np.float32)
    out = np.empty(n + x.shape[0], dtype=np.float32)
    out[: x.shape[0]] = x
    pos = x.shape[0]
    while pos < n:
        start = pos - xf
        out[start:pos] = out[start:pos] * fout + x[:xf] * fin
        take = x.shape[0] - xf
        out[pos : pos + take] = x[xf:]
        pos += take
    return out[:n]


def _fade(x: np.ndarray, n_in: int, n_out: int) -> np.ndarray:
    x = x.copy()
    if n_in > 0:
        n_in = min(n_in, x.shape[0])
        x[:n_in] *= np.linspace(0.0, 1.0, n_in, dtype=np.float32)
    if n_out > 0:
        n_out = min(n_out, x.shape[0])
        x[-n_out:] *= np.linspace(1.0, 0.0, n_out, dtype=np.float32)
    return x


def _bed_segment(bed: np.ndarray, n: int, offset: int, cfg: MixConfig) -> tuple[np.ndarray, bool]:
    sr = cfg.sample_rate
    fade = int(cfg.fade_s * sr)
    if bed.shape[0] >= n:
        return _fade(bed[offset : offset + n], fade, fade), False
    return _fade(_equal_power_loop(bed, n, int(cfg.crossfade_s * sr)), fade, fade), True


def _placed(audio: np.ndarray, n_max: int, cfg: MixConfig) -> np.ndarray:
    """An event clip cut to n_max samples, with a fade-out only where it was cut."""
    if audio.shape[0] <= n_max:
        return audio
    return _fade(audio[:n_max], 0, int(cfg.fade_s * cfg.sample_rate))


def _plan(
    script: SceneScript,
    sources: SceneSources,
    clips: dict[str, Clip],
    seed: int,
    cfg: MixConfig,
    rng_key: str | None = None,
    turn_reserve: list[float] | None = None,
) -> dict:
    """Draw every free parameter and resolve times: the spec that `render_scene` consumes.

    `rng_key` (default: the scene id) names the random stream: the variants of a contrast
    family share one, so their voices' timing and levels are drawn alike. `turn_reserve`
    gives each turn a minimum slot length (the longest of a crossed family's speech versions),
    and an event with a `window` occupies exactly that long: the timeline then does not
    depend on which version or which clip fills a variant."""
    sr = cfg.sample_rate
    rng = scene_rng(seed, rng_key or script.id)
    turn_n = [clips[s.path].audio.shape[0] for s in sources.turns]
    turn_durs = [n / sr for n in turn_n]
    if turn_reserve is not None and len(turn_reserve) != len(turn_durs):
        raise ValueError(
            f"scene {script.id}: turn_reserve has {len(turn_reserve)} entries for {len(turn_durs)} turns"
        )
    # Compared in whole samples: every variant whose turn fits its reserve gets the very same
    # slot value, so the timeline and the scene length are one per family by construction.
    slot_turns = (
        [max(n, int(round(r * sr))) / sr for n, r in zip(turn_n, turn_reserve)] if turn_reserve else turn_durs
    )
    event_durs, slot_events = [], []
    for e, s in zip(script.events, sources.events):
        d = clips[s.path].audio.shape[0] / sr
        d = min(d, e.max_duration) if e.max_duration else d
        d = min(d, e.window) if e.window else d
        event_durs.append(d)
        slot_events.append(e.window if e.window else d)
    tl: Timeline = resolve(script, slot_turns, slot_events, rng, cfg.timing_config(), cfg.fixed_duration)
    n = int(round(tl.duration * sr))
    # Levels are drawn before the bed offset: the offset's range depends on the bed's length,
    # and the speech level must not depend on which bed a variant has.
    speech_snr = float(rng.uniform(*cfg.speech_snr_db))
    event_snr = float(rng.uniform(*cfg.event_snr_db))
    bed_len = clips[sources.background.path].audio.shape[0]
    bg_offset = int(rng.integers(0, bed_len - n + 1)) if bed_len >= n else 0
    events = []
    for span, d in zip(tl.events, event_durs):
        off = min(span.onset + d, tl.duration)
        events.append(
            {
                "onset_samples": int(round(span.onset * sr)),
                "onset": span.onset,
                "offset": off,
                "length_samples": int(round((off - span.onset) * sr)),
            }
        )
    return {
        "num_samples": n,
        "duration": n / sr,
        "background": {"offset_samples": bg_offset, "looped": bed_len < n},
        "turns": [
            {"onset_samples": int(round(s.onset * sr)), "onset": s.onset, "offset": s.onset + d}
            for s, d in zip(tl.turns, turn_durs)
        ],
        "events": events,
        "speech_snr_db": speech_snr,
        "event_snr_db": event_snr,
        "timing_draws": tl.drawn,
        "rng_key": rng_key or script.id,
        "turn_reserve": list(turn_reserve) if turn_reserve else None,
        "notes": tl.notes,
    }


def unit_layers(plan: dict, sources: SceneSources, clips: dict[str, Clip], cfg: MixConfig):
    """Layers before level setting: the bed segment and the placed sources of each layer."""
    n = plan["num_samples"]
    bed_clip = clips[sources.background.path]
    bed, _ = _bed_segment(bed_clip.audio, n, plan["background"]["offset_samples"], cfg)
    placed: dict[str, list] = {"speech": [], "events": []}
    for src, tp in zip(sources.turns, plan["turns"]):
        c = clips[src.path]
        placed["speech"].append((tp["onset_samples"], c.audio, c))
    for src, ep in zip(sources.events, plan["events"]):
        c = clips[src.path]
        a = _placed(c.audio, min(ep["length_samples"], n - ep["onset_samples"]), cfg)
        placed["events"].append((ep["onset_samples"], a, c))
    return bed, placed


def sum_placed(items, gains, n, kw_of=None) -> np.ndarray:
    out = np.zeros(n, dtype=np.float32)
    for (onset, audio, clip), g in zip(items, gains):
        a = audio if kw_of is None else kw_of(clip, audio)
        end = min(n, onset + a.shape[0])
        if end > onset:
            out[onset:end] += np.float32(g) * a[: end - onset]
    return out


def measure_gains(plan: dict, bed_clip: Clip, placed: dict, cfg: MixConfig, cache: ClipCache) -> dict:
    """Gains that put each layer at its target loudness (per source, then per stem)."""
    sr, n = cfg.sample_rate, plan["num_samples"]
    ref = cfg.background_lufs
    targets = {"background": ref, "speech": ref + plan["speech_snr_db"], "events": ref + plan["event_snr_db"]}
    # The bed is K-weighted once per clip and then cut/looped like the bed itself; the
    # crossfade and edge fades make this differ from filtering the segment by < 0.01 LU.
    kw_full = cache.kweighted(bed_clip.sha256, bed_clip.audio, "bed")
    off = plan["background"]["offset_samples"]
    if kw_full.shape[0] >= n > int(BLOCK_S * sr):
        # The bed's window, read from the clip's running energy (the 50 ms edge fades change
        # the loudness by < 0.01 LU).
        bed_lufs = cache.running_energy(bed_clip.sha256, kw_full, "bed").gated_lufs(sr, off, n)
    else:
        bed_lufs = gated_lufs(_bed_segment(kw_full, n, off, cfg)[0], sr)
    gains: dict[str, dict] = {
        "background": {"stem": db_to_gain(ref - bed_lufs), "measured_unit_lufs": bed_lufs}
    }
    for layer in ("speech", "events"):
        items = placed[layer]
        if not items:
            gains[layer] = {"sources": [], "stem": 0.0, "measured_unit_lufs": None}
            continue
        # Each source to the layer target first (voices and clips come at any level), then one
        # stem-level correction so the layer as a whole hits its target exactly.
        src_gains = [db_to_gain(targets[layer] - c.lufs) for _, _, c in items]

        def kw_of(clip, audio, _layer=layer):
            return cache.kweighted(clip.sha256, audio, _layer)

        unit_lufs = gated_lufs(sum_placed(items, src_gains, n, kw_of), sr, placed_spans(items, n))
        gains[layer] = {
            "sources": src_gains,
            "stem": db_to_gain(targets[layer] - unit_lufs),
            "measured_unit_lufs": unit_lufs,
        }
    for layer in LAYERS:
        gains[layer]["target_lufs"] = targets[layer]
    return gains


def render_scene(
    plan: dict,
    sources: SceneSources,
    clips: dict[str, Clip],
    cfg: MixConfig,
    gains: dict | None,
    cache: ClipCache,
    clip_gain: float | None = None,
    peak_ceiling: float | None = None,
) -> tuple[np.ndarray, dict[str, np.ndarray], dict]:
    """`clip_gain` forces the anti-clipping gain (a contrast family shares the smallest of its
    variants' gains, so stems that should be identical across variants stay identical).
    `peak_ceiling`: the highest peak a forced gain may leave (default: the config's limit; a
    followed lock passes full scale, since its gain was set on the reference's own peak and a
    drift inside the lock's bounds may raise it a little without clipping anything)."""
    n = plan["num_samples"]
    if clip_gain is None and gains is not None and gains.get("clip_gain_forced"):
        clip_gain = gains["clip_gain"]
    bed, placed = unit_layers(plan, sources, clips, cfg)
    if gains is None:
        gains = measure_gains(plan, clips[sources.background.path], placed, cfg, cache)
    bed *= np.float32(gains["background"]["stem"])  # bed is this call's own copy
    stems = {"background": bed}
    for layer in ("speech", "events"):
        g = gains[layer]
        stems[layer] = sum_placed(placed[layer], [s * g["stem"] for s in g["sources"]], n)
    mixture = stems["background"] + stems["speech"]
    mixture += stems["events"]
    peak = peak_abs(mixture)
    top = top_peak(mixture, stems, peak, {k: placed_spans(placed[k], n) for k in ("speech", "events")})
    forced = clip_gain is not None
    if clip_gain is not None:
        ceiling = cfg.peak_limit if peak_ceiling is None else peak_ceiling
        if top * clip_gain > ceiling * (1 + 1e-6):
            raise ValueError(
                f"forced clip gain {clip_gain:.6f} leaves a peak of {top * clip_gain:.4f} "
                f"above the {ceiling} limit"
            )
    else:
        clip_gain = cfg.peak_limit / top if top > cfg.peak_limit else 1.0
    if clip_gain != 1.0:
        # Scale the mixture and the stems alike so mixture == sum(stems) still holds.
        # In place: every array here was made by this call.
        g32 = np.float32(clip_gain)
        mixture *= g32
        for v in stems.values():
            v *= g32
    gains = dict(gains, clip_gain=clip_gain, peak_before=peak, clip_gain_forced=forced)
    return mixture, stems, gains


def top_peak(
    mixture: np.ndarray,
    stems: dict[str, np.ndarray],
    mixture_peak: float | None = None,
    supports: dict[str, list[tuple[int, int]]] | None = None,
) -> float:
    """The peak the anti-clipping gain must bring under the limit: the mixture's or any stem's.
    Every published stem must fit the limit too, not only their sum: where the layers cancel, a
    stem alone can peak above the mixture (and realization 2, which keeps the speech stem and
    changes the others, could then fit no gain at all). `supports`: spans outside which a stem is
    zero, so only they are read."""
    top = peak_abs(mixture) if mixture_peak is None else mixture_peak
    supports = supports or {}
    for k, v in stems.items():
        spans = supports.get(k, [(0, v.shape[0])])
        top = max([top, *(peak_abs(v[s:e]) for s, e in spans)])
    return top


def placed_spans(items, n: int) -> list[tuple[int, int]]:
    """The sorted, disjoint spans a layer's placed clips cover (it is zero elsewhere)."""
    return merged_spans((onset, min(n, onset + a.shape[0])) for onset, a, _ in items)


def load_clips(sources: SceneSources, cache: ClipCache) -> dict[str, Clip]:
    refs = [sources.background, *sources.turns, *sources.events]
    return {r.path: cache.get(r.path) for r in refs}


def compose(
    script: SceneScript,
    sources: SceneSources,
    seed: int = 0,
    cfg: MixConfig | None = None,
    cache: ClipCache | None = None,
    extra: dict | None = None,
    rng_key: str | None = None,
    turn_reserve: list[float] | None = None,
    clip_gain: float | None = None,
) -> MixResult:
    """Mix one scene. `extra` (e.g. voice assignments) is stored in the annotation as is;
    `rng_key`, `turn_reserve` and `clip_gain` serve contrast families (see `_plan`, `render_scene`)."""
    cfg = cfg or MixConfig()
    cache = cache or ClipCache(cfg.sample_rate)
    if len(sources.turns) != len(script.turns):
        raise ValueError(
            f"scene {script.id}: {len(sources.turns)} speech sources for {len(script.turns)} turns"
        )
    if len(sources.events) != len(script.events):
        raise ValueError(
            f"scene {script.id}: {len(sources.events)} event sources for {len(script.events)} events"
        )
    clips = load_clips(sources, cache)
    plan = _plan(script, sources, clips, seed, cfg, rng_key, turn_reserve)
    mixture, stems, gains = render_scene(plan, sources, clips, cfg, None, cache, clip_gain)
    ann = scene_annotation(script, sources, clips, seed, cfg, plan, gains, stems, extra or {})
    return MixResult(mixture, stems, ann)


def scene_annotation(script, sources, clips, seed, cfg, plan, gains, stems, extra) -> dict:
    sr = cfg.sample_rate
    g = gains["clip_gain"]
    loud = {}
    for layer in LAYERS:
        t = gains[layer]["target_lufs"]
        active = layer == "background" or bool(plan["turns" if layer == "speech" else "events"])
        loud[layer] = {
            "target_lufs": t,
            # What the stem measures after the anti-clipping gain (target + clip_gain_db).
            "expected_lufs": t + 20 * math.log10(g) if active else None,
        }
    src = sources
    return {
        "format": ANNOTATION_FORMAT,
        "version": ANNOTATION_VERSION,
        "scene_id": script.id,
        "seed": int(seed),
        "sample_rate": sr,
        "duration": plan["duration"],
        "num_samples": plan["num_samples"],
        "script": script.to_dict(),
        "background": {
            "clip_id": src.background.clip_id,
            "path": src.background.path,
            "sha256": clips[src.background.path].sha256,
            **plan["background"],
        },
        "turns": [
            {
                "index": i,
                "speaker": t.speaker,
                "text": t.text,
                "clip_id": s.clip_id,
                "path": s.path,
                "sha256": clips[s.path].sha256,
                **tp,
            }
            for i, (t, s, tp) in enumerate(zip(script.turns, src.turns, plan["turns"]))
        ],
        "events": [
            {
                "index": j,
                "id": e.id,
                "description": e.description,
                "clip_id": s.clip_id,
                "path": s.path,
                "sha256": clips[s.path].sha256,
                **ep,
            }
            for j, (e, s, ep) in enumerate(zip(script.events, src.events, plan["events"]))
        ],
        "plan": plan,
        "gains": gains,
        "loudness": loud,
        "clip_gain_db": 20 * math.log10(g),
        "mix_config": cfg.model_dump(mode="json"),
        "extra": extra,
        "versions": _versions(),
    }


def _versions() -> dict:
    import soundfile
    import soxr

    return {
        "casu": __version__,
        "numpy": np.__version__,
        "soxr": soxr.__version__,
        "soundfile": soundfile.__version__,
        "pyloudnorm": PYLOUDNORM_VERSION,  # the loudness algorithm's (core/loudness.py ports it)
    }
