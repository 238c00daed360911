"""The dataset folder on disk: each config's arrow features, its parquet shards (row groups of
ROW_GROUP_SIZE rows, written on a thread per config while the build reads the next units), the
card and manifest, the atomic swap into place, and the merge of shard folders into one.

Every new file goes to a hidden temp name first and all are renamed into place at the end, so a
build killed while writing leaves the previous dataset readable.
"""

from __future__ import annotations

import heapq
import json
import os
import shutil
import struct
import threading
from collections import deque
from collections.abc import Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

from casu_dataset.contract import SCENES_CONFIG, dataset_configs, mcq_configs
from casu_dataset.core import atomic
from casu_dataset.core.audio_io import file_sha256
from casu_dataset.core.errors import BuildError, Field
from casu_dataset.core.parquet_files import PARQUET_OPTIONS, row_groups
from casu_dataset.dataset.card import attribution_file, dataset_card, eval_yaml
from casu_dataset.dataset.config import replace_problem
from casu_dataset.dataset.report import BuildReport
from casu_dataset.families.preflight import merge_rejected
from casu_dataset.formats.config_columns import AUDIO, AUDIO_COLUMNS, arrow_schema, columns

if TYPE_CHECKING:
    from casu_dataset.mix.cue_checks import CueMeter


ROW_GROUP_SIZE = 100


def write_parquet(rows: list[dict], config: str, path: Path) -> None:
    """Write one config's rows to `path` as is."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.Table.from_pylist(rows, schema=arrow_schema(config))
    path.parent.mkdir(parents=True, exist_ok=True)
    # FLAC bytes do not compress further; snappy keeps the text columns small and the write
    # fast. pyarrow writes no timestamps, so the file is a pure function of the table.
    # Row groups of ROW_GROUP_SIZE rows: streaming and the Hub viewer read one group at a time.
    pq.write_table(table, str(path), row_group_size=ROW_GROUP_SIZE, **PARQUET_OPTIONS)


def check_writable(out: Path, rows: dict, report: BuildReport, max_skips: int | None) -> None:
    """Refuse (BuildError, nothing written) an empty dataset or one with too many skipped scenes."""

    def reasons():
        return "".join(f"\n  {s['scene_id']}: {s['reason']}" for s in report.skipped[:20])

    if not rows["scenes"]:
        err = BuildError(
            f"no scene left to write ({len(report.built)} built, {len(report.skipped)} skipped"
            f"{', the rest rejected in review' if report.review else ''}); nothing written to "
            f"{out}{reasons()}"
        )
    elif max_skips is not None and len(report.skipped) > max_skips:
        err = BuildError(
            f"{len(report.skipped)} scenes skipped (allowed: {max_skips}); nothing written to {out} "
            "(a larger ",
            Field("max_skips"),
            ", or ",
            Field("max_skips", "None"),
            f", writes the dataset without them){reasons()}",
        )
    else:
        return
    err.report = report
    raise err


PARQUET = "test-00000-of-00001.parquet"  # the name of a config written as one shard
SHARD_ROWS = 1000  # a shard closes at this many rows (a multiple of ROW_GROUP_SIZE) ...
SHARD_BYTES = 256 * 1024 * 1024  # ... or once its row groups hold this many bytes (audio configs)
IO_PENDING = 2  # row-group writes queued behind the ones being written (finish() waits for none)


def shard_name(index: int, count: int, split: str = "test") -> str:
    return f"{split}-{index:05d}-of-{count:05d}.parquet"


def clean_folder_temps(out: Path) -> list[Path]:
    """Remove what killed builds left: temp files inside `out` (older builds wrote into it) and
    staging folders beside it (`atomic.tmp_path(out)`, and `_old_path(out)`) whose writer is gone."""
    out = Path(out)
    gone = []
    if out.is_dir():
        gone += atomic.clean_stale(p for p in out.rglob(atomic.TMP_GLOB) if p.is_file())
    if out.parent.is_dir():
        for name in (out.name, out.name + OLD_SUFFIX):
            gone += atomic.clean_stale(out.parent.glob(f".{name}{atomic.TMP_MARK}*"))
    return gone


OLD_SUFFIX = ".old"


def _old_path(out: Path) -> Path:
    """Where the old build waits while the new one is renamed into place (no atomic exchange)."""
    return atomic.tmp_path(out.with_name(out.name + OLD_SUFFIX))


def light(row: dict) -> dict:
    """A row without its audio bytes (the path stays): what the card and the review need."""
    return {
        k: ({"bytes": None, "path": v["path"]} if k in AUDIO_COLUMNS and v else v) for k, v in row.items()
    }


def audio_column(values: list, typ, pool):
    """An audio column ({bytes, path} or None per row) as a chunk per row whose bytes are the
    row's own bytes object, not a copy: joining the row group (combine_chunks) copies each once,
    as pa.array would have, and gives the same array. Values that are not plain {bytes, path}
    go through pa.array as they are."""
    import pyarrow as pa

    chunks = []
    for v in values:
        b = v.get("bytes") if isinstance(v, dict) else None
        if isinstance(b, bytes) and set(v) <= {"bytes", "path"} and len(b) < 2**31:
            offsets = pa.py_buffer(struct.pack("<ii", 0, len(b)))
            data = pa.Array.from_buffers(pa.binary(), 1, [None, offsets, pa.py_buffer(b)])
            path = pa.array([v.get("path")], type=pa.string(), memory_pool=pool)
            chunks.append(pa.StructArray.from_arrays([data, path], fields=list(typ)))
        else:
            chunks.append(pa.array([v], type=typ, memory_pool=pool))
    return pa.chunked_array(chunks, type=typ)


class FolderWriter:
    """Streams a dataset into a staging folder beside `out` (`atomic.tmp_path(out)`), row group
    by row group (ROW_GROUP_SIZE rows), so memory holds one row group per config, never the
    dataset. `finish` writes the card and the build record (build_manifest.py), flushes
    everything to disk and swaps the staging folder with `out` in one atomic step: a reader, or
    a kill at any moment, sees the old build or the new one, never parts of both. `abort` (and
    the next build, for a killed one) removes the staging folder."""

    def __init__(self, out: Path):
        # A symlinked `out` is built where it points: the link stays, its target is replaced
        # (staged beside the target, so the swap is a rename on one file system).
        self.out = Path(out).expanduser().resolve()
        self.stage = atomic.tmp_path(self.out)
        self.pending: dict[str, list[dict]] = {c: [] for c in dataset_configs()}  # rows not yet converted
        self.parts: dict[str, list] = {
            c: [] for c in dataset_configs()
        }  # converted rows of the next row group
        self.group_rows: dict[str, int] = dict.fromkeys(dataset_configs(), 0)  # ... and their count
        self.groups: dict[str, int] = dict.fromkeys(dataset_configs(), 0)  # row groups handed out
        # Owned by each config's IO thread (read here only after _drain): its shard files, its
        # open shard as (ParquetWriter, rows, bytes), each closed shard's sha256.
        self.shards: dict[str, list[Path]] = {c: [] for c in dataset_configs()}
        self.open: dict[str, tuple] = {}
        self.part_sha: dict[Path, str] = {}
        self.started = False
        self._finishing = False  # finish() queues its writes without waiting
        self._schemas: dict = {}
        self.identity: dict | None = None
        self.cues: CueMeter | None = None  # once a family's scene row is written
        # Parquet encoding and writing run on one thread per config (pyarrow releases the GIL), each
        # file's writes in submission order (the same bytes), while this one reads the next rows;
        # at most IO_PENDING writes wait beyond one per config. At the end, the configs' last row
        # groups are written at once rather than one after another.
        self._io: dict[str, ThreadPoolExecutor] = {}
        self._io_pending: deque[Future] = deque()
        # At most a CPU's worth of files encoded at once, the largest row group first (finish): six
        # configs' threads sharing two CPUs evenly left the largest (the scenes config's four stems)
        # to finish alone, on one CPU, well after the others.
        self._slots = threading.Semaphore(max(1, os.cpu_count() or 1))

    def _start(self) -> None:
        if not self.started:
            why = replace_problem(self.out)  # the API and the CLI checked it; merge_folders and
            if why:  # direct callers of build_dataset come here first
                raise BuildError(Field("out"), f" {self.out}: {why}")
            self.out.parent.mkdir(parents=True, exist_ok=True)
            clean_folder_temps(self.out)
            if self.stage.exists():
                shutil.rmtree(self.stage)
            self.stage.mkdir()
            self.started = True

    def schema(self, config: str):
        """The arrow schema of a config's parquet files (made once)."""
        if config not in self._schemas:
            self._schemas[config] = arrow_schema(config)
        return self._schemas[config]

    def prepare(self) -> None:
        """Load what converting rows needs, now rather than with the first rows: pyarrow, and the
        pandas that pyarrow imports on its first pa.array (~0.2 s), and every config's schema; and
        what writing needs, pyarrow.parquet (~0.09 s), now rather than when the last unit is in
        (the IO threads would import it then, one at a time, while the other CPU idles)."""
        import pyarrow.parquet  # noqa: F401

        for c in dataset_configs():
            self.schema(c)
        self._table(SCENES_CONFIG, [])

    def add(self, config: str, rows: Iterable[dict], cues: dict | None = None) -> None:
        """Queue `rows` of `config` for writing; `cues`: the scene rows' cues a worker measured
        (scene id -> cue_checks.measure_rows' value), else they are measured here."""
        for r in rows:
            self.pending[config].append(r)  # _convert starts a new list
            if config == SCENES_CONFIG and r.get("family_id"):
                # Every slot cue is measured from the stems as written, on other threads while
                # the folder is being written.
                if self.cues is None:
                    from casu_dataset.mix.cue_checks import CueMeter

                    self.cues = CueMeter()
                self.cues.add(r, (cues or {}).get(r["scene_id"]))
            if self.group_rows[config] + len(self.pending[config]) == ROW_GROUP_SIZE:
                self._flush(config)
        # Converted as they come (while workers build the next units) rather than all at the end.
        self._convert(config)

    def _table(self, config: str, rows: list[dict]):
        """pa.Table.from_pylist(rows, schema), with the buffers from the system allocator: arrow's
        default (mimalloc) gives each row group fresh pages, and zeroing them (transparent huge
        pages) cost a build more system time than its parquet writing took. The audio columns are
        views of the rows' FLAC bytes (one chunk a row, no copy: the one copy is made when the row
        group is joined, _write_group); the values are the same."""
        import pyarrow as pa

        schema, kinds = self.schema(config), columns(config)
        pool = pa.system_memory_pool()
        return pa.Table.from_arrays(
            [
                audio_column([r.get(n) for r in rows], f.type, pool)
                if kinds[n] == AUDIO
                else pa.array([r.get(n) for r in rows], type=f.type, memory_pool=pool)
                for n, f in zip(schema.names, schema)
            ],
            schema=schema,
        )

    def _convert(self, config: str) -> None:
        """The config's pending rows, as one more part of the row group being filled."""
        if self.pending[config]:
            self.parts[config].append(self._table(config, self.pending[config]))
            self.group_rows[config] += len(self.pending[config])
            self.pending[config] = []

    def _flush(self, config: str, empty_ok: bool = False, close: bool = False) -> None:
        """Hand the config's row group (its converted parts) to the config's IO thread (`close`:
        its last, so the shard is closed after it)."""
        self._convert(config)
        parts = self.parts[config]
        if not parts and not empty_ok:
            return
        self._start()
        self.parts[config], self.group_rows[config] = [], 0
        self.groups[config] += 1
        self._submit(config, self._write_group, config, parts, close)

    def _write_group(self, config: str, parts: list, close: bool = False) -> None:
        """On the config's IO thread, in submission order (so every shard boundary is decided as
        one thread would): join the parts, write them as one row group, close the shard when full
        (or `close`). The configs' threads join and write their groups at once (pyarrow releases
        the GIL), as many as there are CPUs."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        with self._slots:
            pool = pa.system_memory_pool()
            # One chunk per column, as one conversion of all the rows gives (the same parquet bytes).
            table = pa.concat_tables(parts or [self._table(config, [])]).combine_chunks(memory_pool=pool)
            if config not in self.open:
                part = self.stage / config / f".shard{len(self.shards[config]):05d}.part"
                part.parent.mkdir(parents=True, exist_ok=True)
                self.shards[config].append(part)
                # FLAC bytes do not compress further; snappy keeps the text columns small and the write
                # fast. pyarrow writes no timestamps, so the file is a pure function of its rows.
                self.open[config] = (
                    pq.ParquetWriter(str(part), table.schema, memory_pool=pool, **PARQUET_OPTIONS),
                    0,
                    0,
                )
            w, n, size = self.open[config]
            w.write_table(table, row_group_size=ROW_GROUP_SIZE)
            n, size = n + table.num_rows, size + table.nbytes
            self.open[config] = (w, n, size)
            if close or n >= SHARD_ROWS or size >= SHARD_BYTES:
                self._close_shard(config)

    def _close_shard(self, config: str) -> None:
        """On the config's IO thread: close its open shard, hash it and flush it to disk there
        (the configs' files in parallel, each while the others are still being written)."""
        if config in self.open:
            w, _, _ = self.open.pop(config)
            w.close()
            part = self.shards[config][-1]
            self.part_sha[part] = file_sha256(part)
            atomic.fsync_path(part)

    def _close_last(self, config: str) -> None:
        """On the config's IO thread, in a CPU slot: close its shard (its last row group written)."""
        with self._slots:
            self._close_shard(config)

    def _submit(self, config: str, fn, *args, **kwargs) -> None:
        io = self._io.get(config)
        if io is None:
            io = self._io[config] = ThreadPoolExecutor(1, thread_name_prefix=f"parquet-{config}")
        self._io_pending.append(io.submit(fn, *args, **kwargs))
        # The oldest write is running or next on its thread (every earlier one has returned), so
        # waiting for it cannot wait on this thread. finish() has every row in memory already.
        while not self._finishing and len(self._io_pending) > IO_PENDING + len(self._io):
            self._io_pending.popleft().result()  # a failed write raises here

    def _drain(self) -> None:
        """Wait for every submitted write (the first failure raises), and stop the thread."""
        while self._io_pending:
            self._io_pending.popleft().result()
        for io in self._io.values():
            io.shutdown()
        self._io.clear()

    def finish(
        self, rows: dict, report: BuildReport, settings: dict, on_configs=None, while_writing=None
    ) -> None:
        """`rows`: every config's rows as written (light() is enough): the card is made from them.
        `on_configs(config_hashes)` runs once the parquet files are final and before the card is
        written (build --relock writes the lock there, so the card can name it). `while_writing()`
        runs on this thread once every file's last writes are queued (the IO threads write)."""
        from casu_dataset.formats import build_manifest

        self._start()
        self._finishing = True
        try:
            for c in dataset_configs():
                self._convert(c)
            # The largest last row group first: the threads take their CPU slots in this order.
            for c in sorted(dataset_configs(), key=lambda c: -sum(t.nbytes for t in self.parts[c])):
                if self.parts[c] or not self.groups[c]:
                    # ... and an empty config is one empty shard, as load_dataset expects
                    self._flush(c, empty_ok=True, close=True)
                else:
                    self._submit(c, self._close_last, c)
            if while_writing is not None:
                while_writing()
            self._drain()
            known = {}
            for c in dataset_configs():
                n = len(self.shards[c])
                for i, part in enumerate(self.shards[c]):
                    os.replace(part, self.stage / c / shard_name(i, n))
                    known[f"{c}/{shard_name(i, n)}"] = self.part_sha[part]
            # Only the parquet files exist yet, each hashed as its IO thread closed it.
            shas = build_manifest.file_hashes(self.stage, known)
            hashes = build_manifest.config_hashes(shas, dataset_configs())
            if on_configs is not None:
                on_configs(hashes)
            self.identity = build_manifest.identity(report.lock, {c: hashes[c] for c in mcq_configs()})
            report.identity = self.identity
            if self.cues is not None:
                report.cues = self.cues.result()["summary"]
            card, attribution = dataset_card(rows, report, settings), attribution_file(rows)
            # Timings vary run to run, so they are printed, not written: the folder stays byte-stable.
            build_report = json.dumps(
                {
                    "settings": settings,
                    "built": report.built,
                    "skipped": report.skipped,
                    "lock": report.lock,
                    "realization": report.realization_summary(),
                    "cue_checks": report.cues,
                    "identity": self.identity,
                },
                indent=1,
                sort_keys=True,
            )
            for fname, text in (
                ("ATTRIBUTION.md", attribution),
                ("build_report.json", build_report),
                ("eval.yaml", eval_yaml(rows, settings)),
                ("README.md", card),
            ):
                (self.stage / fname).write_text(text)
            build_manifest.write(self.stage, self.identity, known=shas)
            atomic.fsync_tree(self.stage)  # on disk before the swap, so a crash cannot expose an empty file
            self._swap()
        except BaseException:
            self.abort()
            raise

    def _swap(self) -> None:
        if self.out.exists():
            if not self.out.is_dir():
                raise BuildError(Field("out"), f" {self.out}: is a file, not a folder")
            keep = self.out / ".cache"  # the Hub upload's resume state belongs to the folder, not a build
            if keep.is_dir() and not (self.stage / ".cache").exists():
                shutil.copytree(keep, self.stage / ".cache")
            if not atomic.exchange(self.stage, self.out):
                # No atomic exchange on this file system: two renames; the old build stays at the
                # staging name until the new one is in place.
                old = _old_path(self.out)
                os.replace(self.out, old)
                os.replace(self.stage, self.out)
                self.stage = old
            shutil.rmtree(self.stage, ignore_errors=True)  # now the old build
        else:
            os.replace(self.stage, self.out)

    def abort(self) -> None:
        if self.cues is not None:
            self.cues.close()
        for io in self._io.values():
            io.shutdown(wait=True, cancel_futures=True)  # nothing writes once this returns
        self._io.clear()
        self._io_pending.clear()
        for w, _, _ in self.open.values():
            try:
                w.close()
            except Exception:  # noqa: BLE001  (a half-written part is removed below either way)
                pass
        self.open.clear()
        if self.started and self.stage.exists():
            shutil.rmtree(self.stage, ignore_errors=True)


def merge_folders(out: str | Path, shards: list[str | Path]) -> BuildReport:
    """Join shard folders into one dataset identical to a single-machine build."""
    from casu_dataset.formats.reader import BuiltDataset

    out = Path(out)
    reports = []
    folders = [BuiltDataset(Path(d)) for d in shards]
    for d, ds in zip(shards, folders):
        ds.verify()  # checked first: LoadError (a ValueError) naming the file of another build
        p = Path(d) / "build_report.json"
        if not p.is_file():
            raise BuildError(f"{d}: not a CASU build folder (no build_report.json)")
        reports.append(json.loads(p.read_text()))
    seen_folder: dict[Path, str | Path] = {}
    for d in shards:
        real = Path(d).resolve()
        if real in seen_folder:
            raise BuildError(f"{d}: the same shard folder as {seen_folder[real]}; give each shard once")
        seen_folder[real] = d
    built_in: dict[str, str | Path] = {}
    for d, r in zip(shards, reports):
        for sid in r["built"]:
            if sid in built_in:
                raise BuildError(
                    f"{d}: scene {sid} is also in {built_in[sid]}; shards of one build hold each scene once "
                    "(the same --num-shards, each --shard-index once)"
                )
            built_in[sid] = d
    settings = dict(reports[0]["settings"])

    def same(st):  # clips rejected on first use differ by shard: they are joined, not compared
        return {k: v for k, v in st.items() if k != "catalog_rejected"}

    for d, r in zip(shards, reports):
        if same(r["settings"]) != same(settings):
            raise BuildError(f"{d}: built with different settings than {shards[0]}; shards cannot be merged")
    if any("catalog_rejected" in r["settings"] for r in reports):
        settings["catalog_rejected"] = merge_rejected(
            [r["settings"].get("catalog_rejected") for r in reports]
        )
    files = {c: [ds.files(c) for ds in folders] for c in dataset_configs()}
    # Pass 1 (no audio): the rows the card is made from. Stable by scene: a scene's rows are all
    # in one shard and keep their order.
    rows = {}
    for c in files:
        cols = [n for n in columns(c) if n not in AUDIO_COLUMNS]
        meta = [r for ds in folders for r in ds.table(c, columns=cols).arrow.to_pylist()]
        rows[c] = sorted(meta, key=lambda r: r["scene_id"])
    report = BuildReport(
        built=sorted(b for r in reports for b in r["built"]),
        skipped=sorted((s for r in reports for s in r["skipped"]), key=lambda s: s["scene_id"]),
    )
    locks = {json.dumps(r.get("lock"), sort_keys=True) for r in reports}
    if len(locks) > 1:
        raise BuildError(
            f"{shards[0]}: the shards followed different realization locks; they cannot be merged"
        )
    report.lock = reports[0].get("lock")
    check_writable(out, rows, report, None)
    # Pass 2: the full rows, one row group per shard folder at a time, merged in scene order.
    writer = FolderWriter(out)
    try:
        for c, per_shard in files.items():
            streams = [_stream_rows(d, fs) for d, fs in zip(shards, per_shard)]
            writer.add(c, heapq.merge(*streams, key=lambda r: r["scene_id"]))
        writer.finish(rows, report, settings)
    except BaseException:
        writer.abort()
        raise
    return report


def _stream_rows(folder, files: list[Path]):
    """A shard folder's rows of one config, row group by row group; they must be in scene order
    (as build_dataset writes them) for the merge to equal a single build."""
    last = ""
    for f in files:
        bad = lambda why: BuildError(f"{folder}: {f.name}: not a readable parquet file ({why})")  # noqa: E731
        for rows in row_groups(f, None, bad):
            for r in rows:
                if r["scene_id"] < last:
                    raise BuildError(
                        f"{folder}: {f.name}: rows are not in scene order ({r['scene_id']!r} after "
                        f"{last!r}); cannot merge it without reading it whole"
                    )
                last = r["scene_id"]
                yield r
