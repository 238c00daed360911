"""Where CASU's caches live: one root and one named folder (or file) per cache under it.

The root is `--cache` where a command takes it, else $CASU_CACHE, else ~/.cache/casu. An empty
$CASU_CACHE counts as unset: `Path("")` is the current folder, and a cache must never be
written into wherever a command happens to run."""

from __future__ import annotations

import os
from pathlib import Path

ENV = "CASU_CACHE"

BUILD = "build"  # the scene cache: build/scenes/<key>/ (scene_cache.py)
SCENES = "scenes"  # ... its entries, under a build cache folder
SPEECH = "speech"  # synthesised turns and voice pitches (speech/layer.py)
EMBEDDINGS = "embeddings"  # catalog caption and keyword embeddings (retrieval.py)
ANN = "ann"  # faiss indexes of big catalogs (ann_index.py)
SOURCE_CHECKS = "source_checks"  # source audio measurements (source_check.py)
MODELS = "models"  # models converted for offline use (llm/local.py)
LLM_RESPONSES = "llm_responses.sqlite"  # responses of the writer and critic LLMs (llm/cache.py)
BENCH = "bench"  # benchmark inputs made once (benchmarks/)
PARSED_YAML = "parsed_yaml"  # library files as parsed, by their text's hash (strict_yaml.py)


def cache_root(cache_dir: str | Path | None = None) -> Path:
    """`cache_dir` if given, else $CASU_CACHE if set and not empty, else ~/.cache/casu."""
    if cache_dir:
        return Path(cache_dir)
    return Path(os.environ.get(ENV) or Path.home() / ".cache" / "casu")


def build_dir(cache_dir: str | Path | None = None) -> Path:
    return cache_root(cache_dir) / BUILD


def scenes_dir(build_cache: str | Path) -> Path:
    """The scene entries of a build cache folder (`build_dir()`, or a Ray node's own)."""
    return Path(build_cache) / SCENES


def speech_dir(cache_dir: str | Path | None = None) -> Path:
    return cache_root(cache_dir) / SPEECH


def embeddings_dir(cache_dir: str | Path | None = None) -> Path:
    return cache_root(cache_dir) / EMBEDDINGS


def ann_dir(cache_dir: str | Path | None = None) -> Path:
    return cache_root(cache_dir) / ANN


def source_checks_dir(cache_dir: str | Path | None = None) -> Path:
    return cache_root(cache_dir) / SOURCE_CHECKS


def models_dir(cache_dir: str | Path | None = None) -> Path:
    return cache_root(cache_dir) / MODELS


def llm_responses_file(cache_dir: str | Path | None = None) -> Path:
    return cache_root(cache_dir) / LLM_RESPONSES


def bench_dir(cache_dir: str | Path | None = None) -> Path:
    return cache_root(cache_dir) / BENCH


def parsed_yaml_dir(cache_dir: str | Path | None = None) -> Path:
    return cache_root(cache_dir) / PARSED_YAML
