"""Building a contrast family: its four variants share one random stream, one timeline and one
anti-clipping gain, so the speech stem is byte-identical across the variants that share a speech
version and the non-speech stems across the variants that share a fill.

- `turn_reserve`: in a crossed family, turn i of both speech versions starts at the same time and
  gets the longer of the two durations (speech is synthesised once and cached, so this is cheap).
- `family_clip_gain`: the smallest anti-clipping gain over the variants, applied to all four.
A family is all four variants or nothing: one failed variant drops the family.
"""

from __future__ import annotations

from typing import Callable

from casu_dataset.core.errors import BuildError
from casu_dataset.families.compile import FamilyScene
from casu_dataset.script.schema import SceneScript


def turn_reserve(variants: list, builder, seed: int) -> list[float] | None:
    """Per-turn slot lengths shared by a crossed family's versions (None for slot families), in
    seconds that are whole samples (n / sample rate): the mixer compares them with each turn's
    sample count, so every version gets the same slot, and so one timeline and one length,
    whatever lengths the TTS returned on this machine."""
    first = variants[0]
    if not isinstance(first, FamilyScene) or first.shape != "crossed":
        return None
    sr = builder.mix_config.sample_rate
    by_version: dict[str, SceneScript] = {}
    for v in variants:
        by_version.setdefault(v.speech_version, v.script)
    lengths = []
    for script in by_version.values():
        layer = builder.speech(script, seed, first.rng_key)
        lengths.append([builder.cache.get(str(p)).audio.shape[0] for p in layer.turn_paths])
    if len({len(n) for n in lengths}) != 1:
        raise ValueError(f"family {first.family_id}: the speech versions have different numbers of turns")
    return [max(ns) / sr for ns in zip(*lengths)]


def build_family(
    variants: list, builder, seed: int, build_one: Callable[[object, dict], tuple[dict, bool]]
) -> dict[str, tuple[dict, bool]]:
    """scene id -> (built, cache_hit) for every variant, or raise naming the variant that failed.

    `build_one(scene, settings)` builds (or loads from cache) one variant with the settings
    {rng_key, turn_reserve, clip_gain}; it returns ({annotation, flac}, hit)."""
    first = variants[0]
    reserve = turn_reserve(variants, builder, seed)
    base = {"rng_key": first.rng_key, "turn_reserve": reserve, "clip_gain": None}

    def one(v, settings):
        try:
            return build_one(v, settings)
        except Exception as err:
            # A new exception naming the variant: re-raising `type(err)(msg)` breaks on
            # exception classes whose constructor takes other arguments.
            # A BuildError naming the variant (a build reports the family as skipped and goes on),
            # where compile.FamilyError is a family file that breaks the format (bad input).
            raise BuildError(
                f"family {first.family_id}: variant {v.variant}: {type(err).__name__}: {err}"
            ) from err

    out = {v.script.id: one(v, base) for v in variants}
    gains = {sid: b["annotation"]["gains"]["clip_gain"] for sid, (b, _) in out.items()}
    g = min(gains.values())
    forced = dict(base, clip_gain=g)
    for v in variants:
        if gains[v.script.id] != g:
            out[v.script.id] = one(v, forced)
    return out
