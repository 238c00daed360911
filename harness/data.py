"""Read a built CASU dataset (a local folder or a Hub repo) into evaluation samples.

A local folder is read from exactly the parquet files on disk (its card's `configs:` data
files, or `<config>/<split>-*.parquet`): each file is read once into memory, hashed and parsed
from those same bytes, so the recorded fingerprint is that of what was evaluated.
`datasets.load_dataset(folder)` is not used for folders: it caches a folder under its
basename with a key that ignores the files, so a rebuilt folder (or another folder with the
same name) would be served stale. Hub repos go through `load_dataset` (keyed by revision).

Audio stays as FLAC bytes until a batch needs it; decoding uses soundfile (datasets' own
Audio decoding needs torchcodec, which cannot load beside the CPU torch)."""
from __future__ import annotations

import fnmatch
import functools
import hashlib
import json
import os
import re
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from casu_dataset.audio_io import decode_bytes
from casu_dataset.contract import LETTERS, AnnotationError, SceneAnnotation
from casu_dataset.table_schema import AUDIO, column_problems, id_problems, kind_of, schema_difference

from .conditions import Condition, render
from casu_dataset.errors import CasuError


class DatasetError(CasuError, ValueError):
    pass


def is_local(source: str) -> bool:
    """A folder path (existing or not) rather than a Hub id `ORG/NAME`."""
    return os.path.exists(source) or source.startswith(("/", ".", "~")) or source.count("/") != 1


def _card_configs(root: Path) -> dict[str, dict[str, list[str]]]:
    """{config: {split: [glob, ...]}} from the dataset card's YAML header (empty if none)."""
    import yaml
    card = root / "README.md"
    if not card.is_file():
        return {}
    try:  # strict: a card in another encoding would read as a header without the configs it declares
        text = card.read_bytes().decode("utf-8")
    except UnicodeDecodeError as err:
        raise DatasetError(f"--dataset {root}: README.md: the dataset card is not UTF-8 (byte {err.start}: "
                           f"{err.reason}); save it as UTF-8") from None
    except OSError as err:
        raise DatasetError(f"--dataset {root}: README.md: cannot read the dataset card ({err.strerror or err})") from None
    m = re.match(r"^---\s*\n(.*?)\n---\s*(\n|$)", text, re.S)
    try:
        head = yaml.safe_load(m.group(1)) if m else None
    except yaml.YAMLError as err:
        raise DatasetError(f"--dataset {root}: README.md: the card's YAML header does not parse ({err})") from None
    out: dict[str, dict[str, list[str]]] = {}
    for c in (head or {}).get("configs") or []:
        if not isinstance(c, dict) or "config_name" not in c:
            continue
        files = c.get("data_files", [])
        splits: dict[str, list[str]] = {}
        for item in files if isinstance(files, list) else [files]:
            if isinstance(item, dict):
                p = item.get("path", [])
                splits.setdefault(str(item.get("split", "train")), []).extend([p] if isinstance(p, str) else p)
            else:
                splits.setdefault("train", []).append(str(item))
        out[str(c["config_name"])] = splits
    return out


def local_files(root: Path, config: str, split: str) -> list[Path]:
    """The parquet files of one config and split, sorted; a clear error when there are none."""
    if not root.is_dir():
        raise DatasetError(f"--dataset {root}: no such folder")
    for what, name in (("config", config), ("split", split)):
        if not _plain_name(name):  # `..` or `a/b` would read parquet files outside the config's folder
            raise DatasetError(f"--dataset {root}: {what} {name!r} is not a plain folder name (no '/', '\\', "
                               "leading '.'): a config can never leave the dataset folder")
    card = _card_configs(root)
    if config in card:
        globs = card[config].get(split)
        if globs is None:
            raise DatasetError(f"--dataset {root}: config {config!r} has no split {split!r} "
                               f"(splits: {', '.join(sorted(card[config]))})")
    else:
        globs = [f"{config}/{split}-*.parquet", f"{config}/{split}.parquet"]
    for g in globs:
        if not isinstance(g, str) or os.path.isabs(g) or ".." in re.split(r"[\\/]", g):
            raise DatasetError(f"--dataset {root}: README.md: config {config!r} data file {g!r} points outside the "
                               "dataset folder (paths are relative, without '..')")
    inside = root.resolve()
    files = sorted({p for g in globs for p in root.glob(g) if p.is_file() and fnmatch.fnmatch(p.name, "*.parquet")})
    for p in files:  # a link in the folder may still point elsewhere
        if not p.resolve().is_relative_to(inside):
            raise DatasetError(f"--dataset {root}: {p.relative_to(root)} resolves to {p.resolve()}, outside the "
                               "dataset folder: a config can never read files from elsewhere")
    if not files:
        known = sorted(set(card) | {p.name for p in root.iterdir() if p.is_dir() and any(p.glob("*.parquet"))})
        raise DatasetError(f"--dataset {root}: no parquet files for config {config!r} split {split!r} "
                           f"(looked for {', '.join(globs)}; configs here: {', '.join(known) or 'none'})")
    return files


def _plain_name(name) -> bool:
    return isinstance(name, str) and bool(re.fullmatch(r"[A-Za-z0-9_-][A-Za-z0-9_.-]*", name))


@dataclass
class Table:
    rows: list[dict]
    columns: list[str]
    digest: str  # sha256 over the file names and the exact bytes parsed
    schema: object = None  # the pyarrow schema (checked by casu_dataset.table_schema before anything runs)


def read_local(root: Path, config: str, split: str) -> Table:
    import pyarrow as pa
    import pyarrow.parquet as pq
    from casu_dataset.build_manifest import MixedFolderError, verify
    h = hashlib.sha256()
    tables = []
    read: dict[str, str] = {}
    for f in local_files(root, config, split):
        blob = f.read_bytes()  # read once: these bytes are both hashed and parsed
        h.update(json.dumps([f.relative_to(root).as_posix(), len(blob)]).encode())
        sha = hashlib.sha256(blob)
        h.update(sha.digest())
        read[f.relative_to(root).as_posix()] = sha.hexdigest()
        try:
            # One thread: the files are small, and Arrow's pool threads can abort the
            # interpreter at exit ("terminate called without an active exception").
            t = pq.read_table(pa.BufferReader(blob), use_threads=False)
        except (pa.ArrowException, OSError) as err:
            raise DatasetError(f"--dataset {root}: {f.relative_to(root)}: not a readable parquet file "
                               f"({err})") from None
        if tables:  # shards of one config must agree exactly: promoting would fill the gaps with nulls
            diff = schema_difference(tables[0][1].schema, t.schema)
            if diff:
                raise DatasetError(f"--dataset {root}: config {config!r}: {f.relative_to(root)} has another schema "
                                   f"than {tables[0][0].relative_to(root)} ({diff})")
        tables.append((f, t))
    try:
        # Every file read must be the one its build wrote, and no file of another build may sit
        # beside them (casu_build.json): a folder mixing two builds is refused, naming the file.
        verify(root, read)
    except MixedFolderError as err:
        raise DatasetError(f"--dataset {root}: {err}") from None
    table = pa.concat_tables([t for _, t in tables]) if len(tables) > 1 else tables[0][1]
    return Table(table.to_pylist(), list(table.column_names), h.hexdigest(), table.schema)


def read_hub(repo: str, config: str, split: str) -> Table:
    import datasets
    try:
        ds = datasets.load_dataset(repo, config, split=split)
    except (FileNotFoundError, ValueError) as err:
        raise DatasetError(f"--dataset {repo}: cannot load config {config!r} split {split!r} ({err})") from None
    for col, feat in ds.features.items():
        if isinstance(feat, datasets.Audio):
            ds = ds.cast_column(col, datasets.Audio(decode=False))
    return Table(list(ds), list(ds.column_names), ds._fingerprint, getattr(ds.data, "schema", None))


# Columns a task reads from its config (beyond these, missing text columns read as empty).
REQUIRED = {"multiple_choice": ["id", "scene_id", "audio", "question", "options", "answer"],
            "generate_until": ["id", "scene_id", "audio", "reference"]}
METRIC_COLUMNS = {"event_match": "event_descriptions", "one_minus_wer": "turns"}


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
    family_id: str = ""          # contrast family (v2 datasets); "" outside a family
    variant: str = ""
    family_shape: str = ""       # slot | crossed
    slot_kind: str = ""          # event | background


class CasuData:
    def __init__(self, source: str | Path, seed: int = 0):
        self.source = str(source)
        self.seed = seed
        self._audio_cache: OrderedDict = OrderedDict()
        self._warned: set = set()
        self.decode_seconds = 0.0

    @functools.lru_cache(maxsize=None)
    def table(self, config: str, split: str = "test") -> Table:
        """One config and split, read once per CasuData (every later use sees the same rows)."""
        if is_local(self.source):
            return read_local(Path(self.source).expanduser(), config, split)
        return read_hub(self.source, config, split)

    def check(self, task) -> None:
        """Fail before any model runs if the task's config lacks a column the task reads."""
        t = self.table(task.dataset_config, task.split)
        need = REQUIRED[task.output_type] + [c for m, c in METRIC_COLUMNS.items() if m in task.metrics]
        where = f"--dataset {self.source}: config {task.dataset_config!r} split {task.split!r}"
        missing = [c for c in need if c not in t.columns]
        if missing:
            raise DatasetError(f"{where} has no column(s) {missing}, which task {task.task!r} ({task.output_type}) needs")
        bad = column_problems(t.schema, need) if t.schema is not None else []
        bad += id_problems(t.rows)
        if bad:
            raise DatasetError(f"{where}: " + "; ".join(bad))
        self.samples(task.dataset_config, task.split)  # every row parses before any model runs

    def check_all(self, tasks) -> None:
        """Every task's config checked; "evaluated 0 requests" with exit 0 is a wrong result, so a
        run whose configs are all empty is refused, and an empty one among others is named."""
        import sys
        for t in tasks:
            self.check(t)
        empty = [t for t in tasks if not self.table(t.dataset_config, t.split).rows]
        if empty and len(empty) == len(tasks):
            raise DatasetError(f"--dataset {self.source}: " + "; ".join(
                f"config {t.dataset_config!r} split {t.split!r} has no rows" for t in empty)
                + f": task(s) {', '.join(t.task for t in empty)} would evaluate nothing")
        for t in empty:
            if (t.dataset_config, t.split) in self._warned:
                continue
            self._warned.add((t.dataset_config, t.split))
            print(f"warning: --dataset {self.source}: config {t.dataset_config!r} split {t.split!r} has no rows: "
                  f"task {t.task!r} scores nothing (reported with n = 0)", file=sys.stderr)

    @functools.lru_cache(maxsize=None)
    def samples(self, config: str, split: str = "test") -> list[Sample]:
        t = self.table(config, split)
        out = []
        for i, row in enumerate(t.rows):
            where = f"--dataset {self.source}: config {config!r} row {i}"
            try:
                s = Sample(
                    id=row["id"], task=row.get("task") or config, scene_id=row["scene_id"],
                    audio=row["audio"]["bytes"], question=row.get("question") or "",
                    options=list(row.get("options") or []), answer=row.get("answer") or "",
                    layers=list(row.get("layers") or []), minimal_pair_id=row.get("minimal_pair_id") or "",
                    place=row.get("place") or "", speech_type=row.get("speech_type") or "",
                    reference=row.get("reference") or "", event_descriptions=list(row.get("event_descriptions") or []),
                    turns=list(row.get("turns") or []), family_id=row.get("family_id") or "",
                    variant=row.get("variant") or "", family_shape=row.get("family_shape") or "",
                    slot_kind=row.get("slot_kind") or "")
            except KeyError as err:
                raise DatasetError(f"{where}: missing field {err}") from None
            except TypeError:  # a null struct or list where a value belongs
                nulls = [c for c in ("id", "scene_id", "audio") if row.get(c) is None]
                raise DatasetError(f"{where}: field(s) {nulls or 'of a wrong type'} are null") from None
            if not isinstance(s.scene_id, str) or not s.scene_id.strip():
                raise DatasetError(f"{where} ({s.id}): field 'scene_id' is {s.scene_id!r}: every row names its scene")
            if not isinstance(s.audio, bytes) or not s.audio:
                raise DatasetError(f"{where} ({s.id}): field 'audio' has no bytes")
            if "options" in t.columns:  # a multiple-choice row: every field the prompt and the score use
                if not isinstance(row.get("question"), str) or not row["question"].strip():
                    raise DatasetError(f"{where} ({s.id}): field 'question' is {row.get('question')!r}: empty")
                if any(not isinstance(o, str) or not o.strip() for o in s.options):
                    raise DatasetError(f"{where} ({s.id}): field 'options' has a null or empty option: {s.options!r}")
                if not isinstance(row.get("answer"), str):
                    raise DatasetError(f"{where} ({s.id}): field 'answer' is {row.get('answer')!r}, not a letter")
            if "options" in t.columns and not (0 < len(s.options) <= len(LETTERS)
                                               and s.answer in tuple(LETTERS[: len(s.options)])):  # not "AB"
                raise DatasetError(f"{where} ({s.id}): answer {s.answer!r} is not one of the letters of its "
                                   f"{len(s.options)} option(s)")
            out.append(s)
        return out

    def check_scenes(self, samples: list[Sample]) -> None:
        """The `scenes` config the layer conditions render from: stems of the audio type, an
        annotation string, unique scene ids, and a row for every sample's scene (else each
        sample would fail alone, deep in rendering, with a TypeError or KeyError)."""
        t = self.table("scenes", "test")
        where = f"--dataset {self.source}: config 'scenes'"
        need = ["scene_id", "background", "speech", "events", "annotation"]
        missing = [c for c in need if c not in t.columns]
        if missing:
            raise DatasetError(f"{where} has no column(s) {missing}, which --conditions other than the full "
                               "mixture render from")
        bad = column_problems(t.schema, need) if t.schema is not None else []
        for name in ("background", "speech", "events"):
            if t.schema is not None and name in t.schema.names:
                got = kind_of(t.schema.field(name).type)
                if got != AUDIO:
                    bad.append(f"column {name!r} is {got}, not {AUDIO}")
        if bad:  # the rows below are only read once the types are right
            raise DatasetError(f"{where}: " + "; ".join(bad))
        bad += id_problems([{"id": r.get("scene_id")} for r in t.rows])
        for i, r in enumerate(t.rows):
            empty = [c for c in ("background", "speech", "events") if not (r.get(c) or {}).get("bytes")]
            if empty:
                bad.append(f"row {i} ({r.get('scene_id')!r}): stem(s) {empty} have no bytes")
                break
            try:  # the conditions read the turn and event spans from it
                SceneAnnotation.parse(r.get("annotation"), f"row {i} ({r.get('scene_id')!r}): annotation")
            except AnnotationError as err:
                bad.append(str(err))
                break
        have = {r.get("scene_id") for r in t.rows}
        lost = sorted({s.scene_id for s in samples} - have)
        if lost:
            bad.append(f"no row for scene(s) {lost[:5]}{' ...' if len(lost) > 5 else ''} that questions use")
        if bad:
            raise DatasetError(f"{where}: " + "; ".join(bad))

    @functools.cached_property
    def _scenes(self) -> dict[str, dict]:
        return {r["scene_id"]: {"background": r["background"]["bytes"], "speech": r["speech"]["bytes"],
                                "events": r["events"]["bytes"], "annotation": r["annotation"]}
                for r in self.table("scenes", "test").rows}

    @functools.cached_property
    def identity(self) -> dict | None:
        """The dataset identity its build recorded (lock sha256 + question-config hashes), or None
        for a folder without a build record and for Hub repos."""
        if not is_local(self.source):
            return None
        from casu_dataset.build_manifest import MixedFolderError, read
        try:
            record = read(Path(self.source).expanduser())
        except MixedFolderError as err:
            raise DatasetError(f"--dataset {self.source}: {err}") from None
        return record["identity"] if record else None

    def fingerprint(self, parts: list) -> str:
        """A hash of exactly the data read: each item a config name (split "test") or (config, split)."""
        h = hashlib.sha256()
        for c, s in sorted({(p, "test") if isinstance(p, str) else tuple(p) for p in parts}):
            h.update(json.dumps([c, s, self.table(c, s).digest]).encode())
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
            try:
                ann = SceneAnnotation.parse(sc["annotation"], f"--dataset {self.source}: scene {sample.scene_id!r} annotation")
            except AnnotationError as err:
                raise DatasetError(str(err)) from None
            x = render(condition, stems, ann, self.seed)
        self.decode_seconds += time.perf_counter() - t0
        self._audio_cache[key] = x
        if len(self._audio_cache) > 32:
            self._audio_cache.popitem(last=False)
        return x
