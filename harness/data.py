"""Read a built CASU dataset (a local folder or a Hub repo) into evaluation samples.

Audio stays as FLAC bytes until a batch needs it; decoding uses soundfile (datasets' own
Audio decoding needs torchcodec, which cannot load beside the CPU torch)."""
from __future__ import annotations

import functools
import hashlib
import json
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from casu_dataset.audio_io import decode_bytes

from .conditions import Condition, render


class DatasetError(ValueError):
    pass


@dataclass
class Sample:
    id: str
    task: str
    scene_id: str
    audio: bytes = field(repr=False)
    question: str = ""
    options: list[str] = field(default_factory=list)
    answer: str = ""
    layers: list[str] = field(default_factory=list)
    minimal_pair_id: str = ""
    place: str = ""
    speech_type: str = ""
    reference: str = ""
    event_descriptions: list[str] = field(default_factory=list)
    turns: list[str] = field(default_factory=list)


def _load(source: str, config: str, split: str):
    import datasets
    try:
        ds = datasets.load_dataset(source, config, split=split)
    except (FileNotFoundError, ValueError) as err:
        raise DatasetError(f"--dataset {source}: cannot load config {config!r} split {split!r} ({err})") from None
    for col, feat in ds.features.items():
        if isinstance(feat, datasets.Audio):
            ds = ds.cast_column(col, datasets.Audio(decode=False))
    return ds


class CasuData:
    def __init__(self, source: str | Path, seed: int = 0):
        self.source = str(source)
        self.seed = seed
        self._audio_cache: OrderedDict = OrderedDict()
        self.decode_seconds = 0.0

    @functools.lru_cache(maxsize=None)
    def samples(self, config: str, split: str = "test") -> list[Sample]:
        ds = _load(self.source, config, split)
        out = []
        for i, row in enumerate(ds):
            try:
                out.append(Sample(
                    id=row["id"], task=row.get("task", config), scene_id=row["scene_id"], audio=row["audio"]["bytes"],
                    question=row.get("question", ""), options=list(row.get("options") or []),
                    answer=row.get("answer", ""), layers=list(row.get("layers") or []),
                    minimal_pair_id=row.get("minimal_pair_id") or "", place=row.get("place", ""),
                    speech_type=row.get("speech_type", ""), reference=row.get("reference", ""),
                    event_descriptions=list(row.get("event_descriptions") or []), turns=list(row.get("turns") or [])))
            except (KeyError, TypeError) as err:
                raise DatasetError(f"--dataset {self.source}: config {config!r} row {i}: missing field {err}") from None
        return out

    @functools.cached_property
    def _scenes(self) -> dict[str, dict]:
        ds = _load(self.source, "scenes", "test")
        return {r["scene_id"]: {"background": r["background"]["bytes"], "speech": r["speech"]["bytes"],
                                "events": r["events"]["bytes"], "annotation": r["annotation"]} for r in ds}

    def fingerprint(self, configs: list[str]) -> str:
        """A content hash of the parquet files used (local folders) or the datasets fingerprints."""
        h = hashlib.sha256()
        root = Path(self.source)
        for c in sorted(set(configs)):
            files = sorted((root / c).glob("*.parquet")) if root.is_dir() else []
            if files:
                for f in files:
                    h.update(f.read_bytes())
            else:
                h.update(_load(self.source, c, "test")._fingerprint.encode())
        return h.hexdigest()[:16]

    def audio(self, sample: Sample, condition: Condition) -> np.ndarray:
        """The sample's audio under a condition (16 kHz mono float32), cached per scene."""
        import time
        key = (sample.scene_id, condition.name)
        hit = self._audio_cache.get(key)
        if hit is not None:
            self._audio_cache.move_to_end(key)
            return hit
        t0 = time.perf_counter()
        if condition.is_full:
            x = decode_bytes(sample.audio, f"{sample.id} audio")
        else:
            sc = self._scenes.get(sample.scene_id)
            if sc is None:
                raise DatasetError(f"--dataset {self.source}: scene {sample.scene_id!r} has no stems in 'scenes'")
            stems = {k: decode_bytes(sc[k], f"{sample.scene_id} {k} stem") for k in ("background", "speech", "events")}
            x = render(condition, stems, json.loads(sc["annotation"]), self.seed)
        self.decode_seconds += time.perf_counter() - t0
        self._audio_cache[key] = x
        if len(self._audio_cache) > 32:
            self._audio_cache.popitem(last=False)
        return x
