"""The one reader of a built CASU dataset (a folder the builder wrote, or a Hub repo id) and the
one row type every user of the data gets.

    ds = BuiltDataset("./casu_mini")
    for row in ds.rows("contextual_reasoning"):
        row.question, row.options, row.key, row.waveform

`BuiltDataset` decides local-vs-Hub once, reads the card's `configs:` (config/split -> data
files) once and checks a folder's build record (`build_manifest.verify`) once; every parquet
file it then reads whole is hashed from the same bytes it parses and compared with that record.
A local folder is read with pyarrow directly: `datasets.load_dataset(folder)` caches a folder
by its name, not its content, so a rebuilt folder would be served stale. A Hub repo goes
through `datasets.load_dataset` (keyed by revision), read as its Arrow table (no decoding).

A `Row` keeps its audio in the Arrow column it came from and makes Python bytes of it (or a
waveform) only when asked: a list of rows never holds every row's audio twice, and nothing is
kept once the rows and the table are dropped.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from casu_dataset.contract import FAMILY_FIELDS, LETTERS, SCENES_CONFIG, mcq_configs
from casu_dataset.core import strict_yaml
from casu_dataset.core.audio_io import SAMPLE_RATE
from casu_dataset.core.errors import LoadError
from casu_dataset.core.parquet_files import describe_read_error, read_parquet

if TYPE_CHECKING:  # annotations only: pyarrow is imported where a table is read
    import pyarrow as pa

ALL_CONFIG = "all"  # every multiple-choice question together (the card's default config)


class ConfigNotFoundError(LoadError):
    """The dataset exists but has no such config or split: a caller may skip it, as the review
    page does for a config a folder lacks (no dataset at that path is a plain LoadError)."""


def is_local(source: str | Path) -> bool:
    """A folder path (existing or not) rather than a Hub id `ORG/NAME`."""
    s = str(source)
    return isinstance(source, Path) or os.path.exists(s) or s.startswith(("/", ".", "~")) or s.count("/") != 1


@dataclass(frozen=True)
class AudioRef:
    """One row's place in an audio column (a struct with a binary `bytes` field)."""

    column: pa.ChunkedArray = field(repr=False)  # shared by every row of the table
    index: int

    def bytes(self) -> bytes:
        return self.column[self.index]["bytes"].as_py() or b""


@dataclass(frozen=True)
class Row:
    """One row of a task config: a question (multiple-choice configs, `key` is the correct
    option's letter) or a description reference (scene_description). Text columns a config does
    not have read as "" and list columns as []; `extra` holds every other column as stored."""

    id: str
    scene_id: str
    task: str
    audio: AudioRef = field(repr=False, compare=False)
    question: str = ""
    options: list[str] = field(default_factory=list)
    answer: str = ""
    reference: str = ""
    layers: list[str] = field(default_factory=list)
    minimal_pair_id: str = ""
    place: str = ""
    speech_type: str = ""
    event_descriptions: list[str] = field(default_factory=list)
    turns: list[str] = field(default_factory=list)
    family_id: str = ""  # contrast-family columns (v2 datasets); "" outside a family
    variant: str = ""
    family_shape: str = ""  # slot | crossed
    slot_kind: str = ""  # event | background
    speech_version: str = ""
    fill: str = ""
    speech_group: str = ""
    fill_group: str = ""
    sample_rate: int = SAMPLE_RATE
    extra: dict = field(default_factory=dict, repr=False, compare=False)

    @property
    def audio_bytes(self) -> bytes:
        """The FLAC bytes, read from the table on each use (not kept on the row)."""
        return self.audio.bytes()

    @property
    def waveform(self) -> np.ndarray:
        """Mono float32 at `sample_rate`, decoded on each use (keep it if you need it twice)."""
        from casu_dataset.core.audio_io import decode_bytes

        return decode_bytes(self.audio_bytes, f"{self.id}: audio", self.sample_rate)

    @property
    def key(self) -> str:
        return self.answer

    @property
    def key_index(self) -> int | None:
        return LETTERS.index(self.answer) if self.answer and self.answer in LETTERS else None


@dataclass(frozen=True)
class SceneRow:
    """One row of the `scenes` config: the stems the layer conditions render from and the
    annotation (JSON text, read with contract.SceneAnnotation)."""

    scene_id: str
    annotation: str = field(repr=False)
    stems: dict = field(repr=False, compare=False)  # layer -> AudioRef

    def stem(self, layer: str) -> bytes:
        return self.stems[layer].bytes()


STEMS = ("background", "speech", "events")

_TEXT = ("question", "answer", "reference", "minimal_pair_id", "place", "speech_type", *FAMILY_FIELDS)
_LISTS = ("options", "layers", "event_descriptions", "turns")
_ROW_COLUMNS = {"id", "scene_id", "task", "audio", *_TEXT, *_LISTS}


@dataclass(frozen=True)
class Table:
    """One config and split as read: the Arrow table and where it came from. `digest`: sha256
    over the file names and the exact bytes parsed (a Hub dataset's fingerprint), None when
    only some columns were read."""

    source: str
    config: str
    split: str
    arrow: pa.Table = field(repr=False)
    digest: str | None

    @property
    def columns(self) -> list[str]:
        return list(self.arrow.column_names)

    @property
    def schema(self):
        return self.arrow.schema

    @property
    def num_rows(self) -> int:
        return self.arrow.num_rows

    def column(self, name: str) -> list:
        """One column as Python values (an absent column reads as Nones)."""
        if name not in self.arrow.column_names:
            return [None] * self.arrow.num_rows
        return self.arrow.column(name).to_pylist()

    def require(self, columns: list[str], why: str) -> None:
        """That the table has these columns, of the types a reader reads ("which `why`" names the
        reader in the message); a stem column must be audio."""
        from casu_dataset.formats.table_schema import AUDIO, column_problems, kind_of

        where = f"{self.source}: config {self.config!r} split {self.split!r}"
        missing = [c for c in columns if c not in self.arrow.column_names]
        if missing:
            raise LoadError(f"{where} has no column(s) {missing}, {why}")
        bad = column_problems(self.schema, columns)
        bad += [
            f"column {c!r} is {kind_of(self.schema.field(c).type)}, not {AUDIO}"
            for c in STEMS
            if c in columns and kind_of(self.schema.field(c).type) != AUDIO
        ]
        if bad:
            raise LoadError(f"{where}: " + "; ".join(bad))

    def scene_rows(self) -> list[SceneRow]:
        """The rows of the `scenes` config, checked: unique scene ids, bytes in every stem, an
        annotation contract.SceneAnnotation reads. Call `require` for the columns first."""
        import pyarrow.compute as pc

        from casu_dataset.contract import AnnotationError, SceneAnnotation
        from casu_dataset.formats.table_schema import id_problems

        where = f"{self.source}: config {self.config!r}"
        ids = self.column("scene_id")
        bad = id_problems([{"id": v} for v in ids])
        sizes = {
            k: pc.binary_length(pc.struct_field(self.arrow.column(k), "bytes")).to_pylist() for k in STEMS
        }
        annotations = self.column("annotation")
        for i, sid in enumerate(ids):
            empty = [k for k in STEMS if not sizes[k][i]]
            if empty:
                bad.append(f"row {i} ({sid!r}): stem(s) {empty} have no bytes")
                break
            try:  # the conditions read the turn and event spans from it
                SceneAnnotation.parse(annotations[i], f"row {i} ({sid!r}): annotation")
            except AnnotationError as err:
                bad.append(str(err))
                break
        if bad:
            raise LoadError(f"{where}: " + "; ".join(bad))
        stems = {k: self.arrow.column(k) for k in STEMS}
        return [
            SceneRow(sid, annotations[i], {k: AudioRef(c, i) for k, c in stems.items()})
            for i, sid in enumerate(ids)
        ]

    def rows(self) -> list[Row]:
        """Every row, checked: ids and scene ids non-empty and unique ids, audio bytes present, and
        in a multiple-choice config a question, non-empty options and one of their letters as the
        answer. Raises LoadError naming the row."""
        from casu_dataset.formats.table_schema import id_problems

        where = f"{self.source}: config {self.config!r}"
        bad = id_problems([{"id": v} for v in self.column("id")])
        if bad:
            raise LoadError(f"{where}: " + "; ".join(bad))
        import pyarrow.compute as pc

        audio = self.arrow.column("audio") if "audio" in self.arrow.column_names else None
        # byte counts without making Python bytes of the audio (a null struct counts as None)
        sizes = (
            pc.binary_length(pc.struct_field(audio, "bytes")).to_pylist()
            if audio is not None
            else [None] * self.arrow.num_rows
        )
        meta = self.arrow.drop_columns([c for c in ("audio",) if c in self.arrow.column_names]).to_pylist()
        mcq = "options" in self.arrow.column_names
        tasks = set(mcq_configs())
        out = []
        for i, r in enumerate(meta):
            at = f"{where} row {i} ({r['id']})"
            if not isinstance(r.get("scene_id"), str) or not r["scene_id"].strip():
                raise LoadError(f"{at}: field 'scene_id' is {r.get('scene_id')!r}: every row names its scene")
            if not sizes[i]:
                raise LoadError(f"{at}: field 'audio' has no bytes")
            if mcq:
                if not isinstance(r.get("question"), str) or not r["question"].strip():
                    raise LoadError(f"{at}: field 'question' is {r.get('question')!r}: empty")
                opts = r.get("options") or []
                if any(not isinstance(o, str) or not o.strip() for o in opts):
                    raise LoadError(f"{at}: field 'options' has a null or empty option: {opts!r}")
                if not isinstance(r.get("answer"), str):
                    raise LoadError(f"{at}: field 'answer' is {r.get('answer')!r}, not a letter")
                if not (
                    0 < len(opts) <= len(LETTERS) and r["answer"] in tuple(LETTERS[: len(opts)])
                ):  # not "AB"
                    raise LoadError(
                        f"{at}: answer {r['answer']!r} is not one of the letters of its {len(opts)} option(s)"
                    )
                texts = [o.strip().casefold() for o in opts]
                if len(set(texts)) != len(texts):  # two letters, one answer: the key is ambiguous
                    raise LoadError(f"{at}: field 'options' has the same text twice: {opts!r}")
                if r.get("task") not in (None, "") and self.config in tasks and r["task"] != self.config:
                    raise LoadError(
                        f"{at}: field 'task' is {r['task']!r} in config {self.config!r}: the card's "
                        "config paths point at another task's files"
                    )
            fam, var = r.get("family_id"), r.get("variant")
            if ("family_id" in r or "variant" in r) and (fam is None) != (var is None):
                raise LoadError(
                    f"{at}: field 'family_id' is {fam!r} but 'variant' is {var!r}: "
                    "a row of a contrast family has both, a row outside one neither"
                )
            # the text and list columns by name (their types are the Row fields' types)
            columns: dict[str, Any] = {k: r.get(k) or "" for k in _TEXT}
            columns.update({k: list(r.get(k) or []) for k in _LISTS})
            out.append(
                Row(
                    id=r["id"],
                    scene_id=r["scene_id"],
                    task=r.get("task") or self.config,
                    audio=AudioRef(audio, i),
                    **columns,
                    extra={k: v for k, v in r.items() if k not in _ROW_COLUMNS},
                )
            )
        return out


def _required(config: str) -> list[str]:
    """The columns every row of a config has (a task config's rows and the scenes)."""
    return ["scene_id", "audio"] if config == SCENES_CONFIG else ["id", "scene_id", "audio"]


class BuiltDataset:
    """A built CASU dataset: a local folder (`source` a path) or a Hub repo id (`ORG/NAME`).
    `full`: check the sha256 of every file of the build record, not only of the files read."""

    def __init__(self, source: str | Path, full: bool = False):
        self.source = str(source)
        self.local = is_local(source)
        self.root = Path(source).expanduser() if self.local else None
        self._full = full
        self._record: dict | None = None
        self._verified = False

    def __repr__(self) -> str:
        return f"BuiltDataset({self.source!r})"

    # -- a local folder ----------------------------------------------------------------------

    def _folder(self) -> Path:
        if self.root is None:  # not local
            raise LoadError(
                f"{self.source}: a Hub repo id, not a dataset folder (this reads a local folder only)"
            )
        if not self.root.is_dir():
            raise LoadError(
                f"{self.source}: no such folder (build one with `python -m casu_dataset "
                f"build --out {self.source}`)"
            )
        return self.root

    @cached_property
    def card_configs(self) -> dict[str, dict[str, list[str]]]:
        """{config: {split: [glob, ...]}} from the dataset card's YAML header (empty if none)."""
        import yaml

        card = self._folder() / "README.md"
        if not card.is_file():
            return {}
        try:  # strict: a card in another encoding would read as a header without the configs it declares
            text = card.read_bytes().decode("utf-8")
        except UnicodeDecodeError as err:
            raise LoadError(
                f"{card}: the dataset card is not UTF-8 (byte {err.start}: {err.reason}); save it as UTF-8"
            ) from None
        except OSError as err:
            raise LoadError(f"{card}: cannot read the dataset card ({err.strerror or err})") from None
        m = re.match(r"^---\s*\n(.*?)\n---\s*(\n|$)", text, re.S)
        try:
            head = strict_yaml.safe_load(m.group(1), card) if m else None
        except yaml.YAMLError as err:
            raise LoadError(f"{card}: the card's YAML header does not parse ({err})") from None
        out: dict[str, dict[str, list[str]]] = {}
        for c in (head or {}).get("configs") or [] if isinstance(head, dict) else []:
            if not isinstance(c, dict) or "config_name" not in c:
                continue
            files = c.get("data_files", [])
            splits: dict[str, list[str]] = {}
            for item in files if isinstance(files, list) else [files]:
                if isinstance(item, dict):
                    p = item.get("path", [])
                    splits.setdefault(str(item.get("split", "train")), []).extend(
                        [p] if isinstance(p, str) else p
                    )
                else:
                    splits.setdefault("train", []).append(str(item))
            out[str(c["config_name"])] = splits
        return out

    def verify(self) -> dict | None:
        """The folder's build record, checked on first use only: every file belongs to that build
        (no stray or missing file, every size as written; with `full`, every sha256). None
        without a record. Each file read later is checked against it by its sha256."""
        if not self._verified:
            from casu_dataset.formats.build_manifest import MixedFolderError, verify

            try:
                self._record = verify(self._folder(), full=self._full)
            except MixedFolderError as err:
                raise LoadError(str(err)) from None
            self._verified = True
        return self._record

    @property
    def identity(self) -> dict | None:
        """The dataset identity the build recorded (lock sha256 + config hashes); None for a folder
        without a build record and for a Hub repo."""
        return (self.verify() or {}).get("identity") if self.local else None

    def files(self, config: str, split: str = "test") -> list[Path]:
        """The parquet files of one config (`all`: every multiple-choice config) and split, sorted;
        never a file outside the folder."""
        root = self._folder()
        for what, name in (("config", config), ("split", split)):
            if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9_-][A-Za-z0-9_.-]*", name):
                raise LoadError(
                    f"{self.source}: {what} {name!r} is not a plain folder name (no '/', '\\', "
                    "leading '.'): a config can never leave the dataset folder"
                )
        card = self.card_configs
        if config in card:
            globs = card[config].get(split)
            if globs is None:
                raise ConfigNotFoundError(
                    f"{self.source}: config {config!r} has no split {split!r} "
                    f"(splits: {', '.join(sorted(card[config]))})"
                )
        else:
            dirs = mcq_configs() if config == ALL_CONFIG else (config,)
            globs = [g for d in dirs for g in (f"{d}/{split}-*.parquet", f"{d}/{split}.parquet")]
        for g in globs:
            if not isinstance(g, str) or os.path.isabs(g) or ".." in re.split(r"[\\/]", g):
                raise LoadError(
                    f"{root / 'README.md'}: config {config!r} data file {g!r} points outside the "
                    "dataset folder (paths are relative, without '..')"
                )
        inside = root.resolve()
        files = sorted(
            {p for g in globs for p in root.glob(g) if p.is_file() and p.name.endswith(".parquet")}
        )
        for p in files:  # a link in the folder may still point elsewhere
            if not p.resolve().is_relative_to(inside):
                raise LoadError(
                    f"{self.source}: {p.relative_to(root)} resolves to {p.resolve()}, outside the "
                    "dataset folder: a config can never read files from elsewhere"
                )
        if not files:
            known = sorted(
                set(card) | {p.name for p in root.iterdir() if p.is_dir() and any(p.glob("*.parquet"))}
            )
            raise ConfigNotFoundError(
                f"{self.source}: no parquet files for config {config!r} split {split!r} "
                f"(looked for {', '.join(globs)}; configs here: {', '.join(known) or 'none'})"
            )
        return files

    def _read_local(self, config: str, split: str, columns: list[str] | None) -> Table:
        import pyarrow as pa
        import pyarrow.parquet as pq

        from casu_dataset.formats.table_schema import column_problems, schema_difference

        root = self._folder()
        files = self.files(config, split)
        record = self.verify()
        h = hashlib.sha256()
        tables: list[tuple[str, pa.Table]] = []
        for f in files:
            rel = f.relative_to(root).as_posix()
            try:  # One thread: Arrow's pool threads can abort the interpreter at exit here.
                if columns is None:
                    blob = f.read_bytes()  # read once: these bytes are both hashed and parsed
                    sha = hashlib.sha256(blob)
                    h.update(json.dumps([rel, len(blob)]).encode())
                    h.update(sha.digest())
                    self._check_file(record, rel, sha.hexdigest())
                    t = read_parquet(pa.BufferReader(blob), use_threads=False)
                else:
                    have = pq.read_schema(f).names
                    t = read_parquet(str(f), columns=[c for c in columns if c in have], use_threads=False)
            except (pa.ArrowException, OSError) as err:
                raise LoadError(
                    f"{self.source}: {rel}: not a readable parquet file ({describe_read_error(err)})"
                ) from None
            if tables:  # shards of one config must agree exactly: promoting would fill the gaps with nulls
                diff = schema_difference(tables[0][1].schema, t.schema)
                if diff:
                    raise LoadError(
                        f"{self.source}: config {config!r}: {rel} has another schema than "
                        f"{tables[0][0]} ({diff})"
                    )
            bad = column_problems(t.schema, _required(config))
            if bad:
                raise LoadError(f"{self.source}: {rel}: " + "; ".join(bad))
            tables.append((rel, t))
        arrow = pa.concat_tables([t for _, t in tables]) if len(tables) > 1 else tables[0][1]
        return Table(self.source, config, split, arrow, h.hexdigest() if columns is None else None)

    def _check_file(self, record: dict | None, rel: str, sha: str) -> None:
        from casu_dataset.formats.build_manifest import MixedFolderError, check_file

        try:
            check_file(self._folder(), record, rel, sha)
        except MixedFolderError as err:
            raise LoadError(str(err)) from None

    # -- a Hub repo --------------------------------------------------------------------------

    def _read_hub(self, config: str, split: str, columns: list[str] | None) -> Table:
        import datasets

        try:
            ds = datasets.load_dataset(self.source, config, split=split)
        except (FileNotFoundError, ValueError) as err:
            raise ConfigNotFoundError(
                f"{self.source}: cannot load config {config!r} split {split!r} ({err})"
            ) from None
        arrow = ds.data.table  # the stored columns as they are: audio stays {bytes, path}
        if columns is not None:
            arrow = arrow.select([c for c in columns if c in arrow.column_names])
        from casu_dataset.formats.table_schema import column_problems

        bad = column_problems(arrow.schema, _required(config))
        if bad:
            raise LoadError(f"{self.source}: config {config!r}: " + "; ".join(bad))
        return Table(self.source, config, split, arrow, ds._fingerprint if columns is None else None)

    # -- either --------------------------------------------------------------------------------

    def table(self, config: str, split: str = "test", columns: list[str] | None = None) -> Table:
        """One config and split, its known columns' types checked (`table_schema`). `columns`:
        read only these (those the files have), e.g. no audio."""
        if self.local:
            return self._read_local(config, split, columns)
        return self._read_hub(config, split, columns)

    def rows(self, config: str, split: str = "test") -> list[Row]:
        """The checked rows of one task config (or `all`)."""
        return self.table(config, split).rows()
