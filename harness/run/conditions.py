"""The paper's layer ablations (table 2): each of speech (P), events (E) and background (B)
kept or replaced by Gaussian noise of the same loudness over that layer's active span.

Built at evaluation time from the dataset's stems (mixture == background + speech + events
holds exactly in CASU builds). A masked layer's noise fills the union of its active
intervals (speech: every turn's onset..offset; events: every event's; background: the
whole scene), is silent elsewhere, and has the integrated loudness (BS.1770, pyloudnorm)
that the stem has over the same samples. Noise is seeded by (seed, scene, layer), so a
condition's audio is the same in every run.

Contrast-family variants (their annotation's plan names a shared `rng_key`) are masked so that
a masked layer cannot tell them apart: the noise is seeded by the family, spans are the
reserved slots (an event's fixed window, a crossed family's turn reserve) rather than the clip's
own length, and the loudness is the layer's recorded target, shared by the family. So removing
the varied slot makes a slot family's four variants the same audio (any model: 25% per variant)
and a crossed family's two and two (at most 50%).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from casu_dataset.contract import LAYER_CODES as CODE  # noqa: F401  (harness.run.conditions.CODE)
from casu_dataset.contract import LAYERS, SceneAnnotation, condition_name
from casu_dataset.core.loudness import SILENCE_LUFS, measure_lufs
from casu_dataset.core.rng import derive_rng


@dataclass(frozen=True)
class Condition:
    keep: frozenset

    @property
    def name(self) -> str:
        """e.g. 'PEB' (all layers), 'P__' (speech only), '___' (all noise)."""
        return condition_name(self.keep)

    @property
    def is_full(self) -> bool:
        return len(self.keep) == 3

    def label(self) -> str:
        return ", ".join(("✓" if layer in self.keep else "×") for layer in LAYERS)


ALL = [
    Condition(frozenset(layer for layer, bit in zip(LAYERS, bits) if bit == "1"))
    for bits in ("000", "001", "010", "011", "100", "101", "110", "111")
]  # the paper's row order
FULL = ALL[-1]
BY_NAME = {c.name: c for c in ALL}


def parse_conditions(spec: str | None) -> list[Condition]:
    """'full' (default), 'all' (the eight subsets), or names like 'PEB,P__,_E_'."""
    if not spec or spec == "full":
        return [FULL]
    if spec == "all":
        return list(ALL)
    out = []
    for name in (s.strip() for s in spec.split(",") if s.strip()):
        if name == "full":
            name = FULL.name
        if name not in BY_NAME:
            raise ValueError(
                f"--conditions {name!r}: use 'full', 'all' or names from {', '.join(BY_NAME)} "
                "(P speech, E events, B background; '_' = replaced by noise)"
            )
        out.append(BY_NAME[name])
    return list(dict.fromkeys(out))


def _ann(annotation) -> SceneAnnotation:
    return annotation if isinstance(annotation, SceneAnnotation) else SceneAnnotation.parse(annotation)


def family_key(annotation) -> str | None:
    """The shared random-stream key of a contrast-family variant, None for a lone scene."""
    return _ann(annotation).family_key


def active_spans(annotation, layer: str, reserved: bool = False) -> list[tuple[int, int]]:
    """See `SceneAnnotation.active_spans` (the contract's typed annotation reader)."""
    return _ann(annotation).active_spans(layer, reserved)


def noise_rng(seed: int, scene_id: str, layer: str) -> np.random.Generator:
    """The masking noise's stream for (seed, scene or family, layer)."""
    return derive_rng(None, f"{seed}|{scene_id}|{layer}")


def matched_noise(
    stem: np.ndarray,
    spans: list[tuple[int, int]],
    sr: int,
    rng: np.random.Generator,
    target: float | None = None,
) -> np.ndarray:
    """Gaussian noise over `spans` with the loudness the stem has there (or `target` LUFS);
    zeros elsewhere."""
    out = np.zeros_like(stem, dtype=np.float32)
    if not spans:
        return out
    active = np.concatenate([stem[a:b] for a, b in spans])
    if target is None:
        target = measure_lufs(active, sr)
    if target <= SILENCE_LUFS:
        return out
    noise = rng.standard_normal(active.shape[0]).astype(np.float32)
    gain = 10 ** ((target - measure_lufs(noise, sr)) / 20)
    noise *= np.float32(gain)
    i = 0
    for a, b in spans:
        out[a:b] = noise[i : i + b - a]
        i += b - a
    return out


def render(condition: Condition, stems: dict[str, np.ndarray], annotation, seed: int = 0) -> np.ndarray:
    """The mixture under a condition: kept stems as they are, masked ones as matched noise.
    `annotation`: the scene's annotation (dict, JSON or SceneAnnotation); AnnotationError if unreadable."""
    ann = _ann(annotation)
    sr = ann.sample_rate
    fam = ann.family_key
    total = None
    for layer in LAYERS:
        x = stems[layer]
        if layer not in condition.keep:
            if fam:
                target = ann.expected_lufs(layer)
                x = matched_noise(
                    x,
                    ann.active_spans(layer, reserved=True),
                    sr,
                    noise_rng(seed, "family:" + fam, layer),
                    target if target is not None else SILENCE_LUFS,
                )
            else:
                x = matched_noise(x, ann.active_spans(layer), sr, noise_rng(seed, ann.scene_id, layer))
        total = x.astype(np.float32) if total is None else total + x
    assert total is not None  # LAYERS is not empty
    return total
