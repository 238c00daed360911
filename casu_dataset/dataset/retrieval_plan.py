"""Retrieval decided in the build's driver: the clip every layer of every scene gets, sent with the
unit to the worker that renders it, so workers load no sentence-transformers model (and never
import torch for scoring).

The driver encodes every query of the build in one batched forward pass (~0.014 s a text on a
2-core CPU, against ~0.18 s one at a time), then runs the same `SceneBuilder.retrieve` a worker
would, in the same order. Embeddings are on the 2**-QUANT_BITS grid and computed in float64, so
scores are exact under any batch and thread count (sounds/retrieval.py): the plan changes no clip
choice, only where the work is done.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Callable

from casu_dataset.sounds.retrieval import keyword_text

# The packages whose import means a model was loaded in this process (each is imported only by
# the model loader that needs it), and what a build reports for each.
MODEL_MODULES = {
    "sentence_transformers": "sentence-transformers",
    "faster_whisper": "whisper",
    "kokoro": "kokoro",
    "zonos": "zonos",
}


def needs_plan(builder) -> bool:
    """Realization 1 without a lock searches the catalog; a lock names every clip, and realization
    2 searches with its own queries (its workers encode what they need)."""
    return getattr(builder, "lock", None) is None and getattr(builder, "realization", 1) == 1


def unit_texts(unit: list) -> list[str]:
    """Every text realization 1 encodes for a unit: each layer's description and keywords."""
    out: list[str] = []
    for scene in unit:
        s = scene.script
        for layer in [s.background, *s.events]:
            out += [layer.description, keyword_text(layer.keywords)]
    return list(dict.fromkeys(out))


def _rng_key(unit: list) -> str | None:
    """The stream a unit's retrieval draws from: a family's (build_family passes the first
    variant's rng_key to every variant), else the scene's own id (None)."""
    if not getattr(unit[0], "family_id", ""):
        return None
    return getattr(unit[0], "rng_key", "") or None


@contextlib.contextmanager
def _one_torch_thread():
    """Single-row scoring GEMMs: one thread is ~100x faster than waiting on a pool of them."""
    torch = sys.modules.get("torch")
    before = torch.get_num_threads() if torch is not None else None
    if torch is not None:
        torch.set_num_threads(1)
    try:
        yield
    finally:
        if torch is not None and before is not None:
            torch.set_num_threads(before)


def plan_retrieval(units: list, builder, seed: int) -> list[dict] | None:
    """Per unit, {(scene id, seed, rng_key): retrieve()'s result} for each of its scenes (None when
    the build retrieves nothing). A scene whose retrieval fails is left out of the plan: its
    worker retrieves it again and reports the same error."""
    if not units or not needs_plan(builder):
        return None
    texts = list(dict.fromkeys(t for u in units for t in unit_texts(u)))
    builder.retriever.embedder.encode(texts)  # one batch; retrieve() then finds them memoised
    plans = []
    with _one_torch_thread():
        for unit in units:
            key, plan = _rng_key(unit), {}
            for scene in unit:
                try:
                    plan[(scene.script.id, int(seed), key)] = builder.retrieve(scene.script, seed, key)
                except Exception:  # noqa: BLE001  (the worker fails it again, with its reason)
                    continue
            plans.append(plan)
    return plans


def planner(units: list, builder, seed: int, cache_dir, seconds: dict) -> Callable[[], list]:
    """A function returning, once computed, each unit's plan (None for a unit already in the
    cache, or when nothing is retrieved); it adds its time to `seconds["plan"]`. Executors call
    it once their workers are starting, so the workers import while the driver encodes."""
    from casu_dataset.dataset.scene_cache import unit_built

    done: list[list] = []

    def plans() -> list:
        if not done:
            t0 = time.perf_counter()
            todo = [u for u in units if needs_plan(builder) and not unit_built(u, seed, builder, cache_dir)]
            by_unit = dict(zip(map(id, todo), plan_retrieval(todo, builder, seed) or []))
            done.append([by_unit.get(id(u)) for u in units])
            seconds["plan"] = seconds.get("plan", 0.0) + time.perf_counter() - t0
        return done[0]

    return plans


class PlannedRetrieve:
    """`SceneBuilder.retrieve` answering from the driver's plan; a scene outside it is retrieved
    by the builder's own method (which loads the encoder, once per process)."""

    def __init__(self, own):
        self.own = own
        self.plan: dict = {}

    def __call__(self, script, seed: int, rng_key: str | None = None) -> dict:
        found = self.plan.get((script.id, int(seed), rng_key))
        return found if found is not None else self.own(script, seed, rng_key)


def follow_plan(builder, plan: dict | None) -> None:
    """Let `builder` take its clips from `plan` (a worker, before it builds the unit)."""
    current = builder.__dict__.get("retrieve")
    if not isinstance(current, PlannedRetrieve):
        if not plan:
            return
        current = builder.retrieve = PlannedRetrieve(builder.retrieve)
    current.plan = plan or {}


@contextlib.contextmanager
def following(builder, plan: dict | None):
    """The driver's own builder follows a unit's plan while it builds it (one local process);
    afterwards it retrieves as before."""
    if not plan:
        yield
        return
    follow_plan(builder, plan)
    try:
        yield
    finally:
        builder.__dict__.pop("retrieve", None)


def loaded_models(builder=None) -> list[str]:
    """The models this process has loaded (a TTS engine counts once it synthesised a turn)."""
    out = [name for mod, name in MODEL_MODULES.items() if mod in sys.modules]
    synth = getattr(builder, "synth", None)
    if synth is not None and synth.misses:
        out.append("tts")
    return out
