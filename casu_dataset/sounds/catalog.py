"""Sound catalogs: a manifest of clips plus their audio files.

The embedded bank ships in the package; the real corpora load from the user's own download
in their published formats: Clotho (captions CSV, five captions per file, optional metadata
CSV with keywords and licenses), FSD50K (ground-truth CSV with AudioSet label names) and
ARCA23K (ground-truth CSV with one AudioSet label per clip). Rows that cannot be used are
either raised on (`on_error="raise"`, naming file and row) or skipped and counted in
`catalog.report`.

Clip audio is validated by `source_check` (readable, finite, not silent, long enough for its
kind, duration measured): `validate="load"` checks every clip while loading (the default for
manifests and the embedded bank; results are cached on disk by content), `validate="lazy"`
checks a clip when retrieval first picks it (the default for the large corpora). Rejected
clips are listed in `catalog.rejected` ({clip_id, path, reason}) and counted in the report.
"""

from __future__ import annotations

import csv
import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import soundfile as sf

from casu_dataset.core.errors import FieldError, InputError
from casu_dataset.sounds import source_check

KINDS = ("background", "event")
MIN_LOOPABLE_S = 2.0  # a bed this long or longer can loop with a crossfade


class CatalogError(InputError, FieldError, ValueError):
    """A catalog file or row that cannot be used; the message names file and row."""


@dataclass
class CatalogClip:
    id: str
    kind: str  # "background" | "event"
    captions: list[str]  # one or more one-sentence captions
    keywords: list[str]
    path: str  # absolute path to the audio file
    duration: float
    type: str = ""  # a coarse class label where the source has one
    sample_rate: int | None = None
    license: str = ""
    author: str = ""
    source: str = ""

    @property
    def caption(self) -> str:
        return self.captions[0]

    def loopable(self) -> bool:
        return self.duration >= MIN_LOOPABLE_S


@dataclass
class LoadReport:
    loaded: int = 0
    skipped: list[dict] = field(default_factory=list)  # {row, reason}

    def skip(self, where: str, reason: str) -> None:
        self.skipped.append({"row": where, "reason": reason})

    def summary(self) -> str:
        s = f"{self.loaded} clips loaded, {len(self.skipped)} skipped"
        reasons: dict[str, int] = {}
        for r in self.skipped:
            key = r["reason"].split(":")[0]
            reasons[key] = reasons.get(key, 0) + 1
        return s + ("" if not reasons else " (" + ", ".join(f"{k}: {v}" for k, v in reasons.items()) + ")")


VALIDATE_MODES = ("load", "lazy")


class Catalog:
    def __init__(
        self,
        name: str,
        clips: list[CatalogClip],
        report: LoadReport | None = None,
        rejected: list[dict] | None = None,
        lazy: dict | None = None,
    ):
        self.name = name
        self.clips = clips
        self.report = report or LoadReport(loaded=len(clips))
        self.rejected: list[dict] = list(rejected or [])  # {clip_id, path, reason}
        self._lazy: dict[str, source_check.CheckCache] = dict(lazy or {})  # clip id -> checker, until checked
        self.verdicts: dict[str, str | None] = {}  # lazily checked clips: id -> reason, None if usable
        self.measured_duration: dict[str, float] = {}
        ids: dict[str, int] = {}
        for i, c in enumerate(clips):
            if c.id in ids:
                raise CatalogError(
                    f"catalog {name}: duplicate clip id {c.id!r} (entries {ids[c.id]} and {i})"
                )
            if c.kind not in KINDS:
                raise CatalogError(f"catalog {name}: clip {c.id}: kind {c.kind!r} is not one of {KINDS}")
            ids[c.id] = i
        self._index = ids

    def __len__(self) -> int:
        return len(self.clips)

    def __getitem__(self, clip_id: str) -> CatalogClip:
        try:
            return self.clips[self._index[clip_id]]
        except KeyError:
            raise KeyError(f"catalog {self.name}: no clip {clip_id!r}") from None

    def check(self, clip: CatalogClip) -> str | None:
        """Why a clip cannot be mixed (validating it now if its catalog is lazy), or None."""
        if clip.id in self.verdicts:
            return self.verdicts[clip.id]
        checks = self._lazy.pop(clip.id, None)
        if checks is None:
            return None  # validated when loaded
        reason, m = checks.reason(clip.path, clip.kind)
        checks.save()
        self.verdicts[clip.id] = reason
        if reason:
            self.rejected.append(
                {
                    "clip_id": clip.id,
                    "path": clip.path,
                    "reason": reason,
                    "kind": clip.kind,
                    "type": clip.type,
                }
            )
            self.report.skip(f"{self.name}: clip {clip.id}", reason)
        elif "duration" in m:
            self.measured_duration[clip.id] = m["duration"]
        return reason

    def duration_of(self, clip: CatalogClip) -> float:
        return self.measured_duration.get(clip.id, clip.duration)

    def fingerprint(self) -> str:
        """Content hash of what retrieval sees: ids, kinds, bank types, captions, keywords,
        durations. The type is in it because a fill retrieves only clips of its own type: a clip
        moved to another type (`build_bank.py --labels`) changes what a scene can retrieve, so
        every cache keyed on the catalog must miss."""
        h = hashlib.sha256()
        for c in self.clips:
            row = [c.id, c.kind, c.type, c.captions, c.keywords, round(c.duration, 3)]
            h.update(json.dumps(row).encode())
        return h.hexdigest()[:20]

    def merged(self, other: "Catalog") -> "Catalog":
        cat = Catalog(
            f"{self.name}+{other.name}",
            self.clips + other.clips,
            LoadReport(self.report.loaded + other.report.loaded, self.report.skipped + other.report.skipped),
            self.rejected + other.rejected,
            {**self._lazy, **other._lazy},
        )
        cat.verdicts = {**self.verdicts, **other.verdicts}
        cat.measured_duration = {**self.measured_duration, **other.measured_duration}
        return cat

    # --- loaders ---------------------------------------------------------------------
    @classmethod
    def from_manifest(
        cls,
        path: str | Path,
        on_error: str = "raise",
        validate: str = "load",
        cache_dir: str | Path | None = None,
    ) -> "Catalog":
        """A CASU manifest.json: {"clips": [{id, kind, caption|captions, keywords, file, ...}]}.
        A `duration` field is only a hint: validation measures the audio."""
        path = Path(path)
        try:
            data = json.loads(path.read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
            raise CatalogError(f"{path}: cannot read catalog manifest: {err}") from None
        if not isinstance(data, dict) or not isinstance(data.get("clips", []), list):
            raise CatalogError(f"{path}: a catalog manifest is a JSON object with a 'clips' list")
        root = path.parent
        report, clips, seen = LoadReport(), [], set()
        for i, row in enumerate(data.get("clips", [])):
            where = f"{path}: clips[{i}]"
            try:
                cid = str(row["id"])
                if cid in seen:
                    raise CatalogError(f"{where}: duplicate id {cid!r}")
                caps = row.get("captions") or [row["caption"]]
                audio = (root / row["file"]).resolve()
                if not audio.is_file():
                    raise FileNotFoundError(f"missing audio file: {audio}")
                clip = CatalogClip(
                    id=cid,
                    kind=row["kind"],
                    captions=list(caps),
                    keywords=list(row["keywords"]),
                    path=str(audio),
                    duration=float(row.get("duration") or 0.0),
                    type=row.get("type", ""),
                    sample_rate=row.get("sample_rate"),
                    license=row.get("license", ""),
                    author=row.get("author") or "",
                    source=row.get("source_package", ""),
                )
                if clip.kind not in KINDS:
                    raise CatalogError(f"{where}: kind {clip.kind!r} is not one of {KINDS}")
            except CatalogError:
                raise
            except (KeyError, TypeError, ValueError, FileNotFoundError) as err:
                _handle(on_error, report, where, _reason(err))
                continue
            seen.add(cid)
            clips.append(clip)
        return _validated(cls, data.get("name", path.stem), clips, report, validate, cache_dir, path)

    @classmethod
    def embedded(cls, cache_dir: str | Path | None = None) -> "Catalog":
        from casu_dataset.sounds.bank import bank_dir

        return cls.from_manifest(bank_dir() / "manifest.json", cache_dir=cache_dir)

    @classmethod
    def from_clotho(
        cls,
        captions_csv: str | Path,
        audio_dir: str | Path,
        metadata_csv: str | Path | None = None,
        on_error: str = "skip",
        validate: str = "lazy",
        cache_dir: str | Path | None = None,
    ) -> "Catalog":
        """Clotho: `file_name,caption_1..caption_5`; beds (15-30 s scenes). The optional
        metadata CSV gives `keywords` (';'-separated) and `license` per file."""
        captions_csv, audio_dir = Path(captions_csv), Path(audio_dir)
        _need_dir(audio_dir, captions_csv)
        meta = {}
        if metadata_csv:
            for _, row in _rows(Path(metadata_csv), ["file_name"]):
                meta[row["file_name"]] = row
        report, clips = LoadReport(), []
        seen: dict[str, str] = {}
        for where, row in _rows(captions_csv, ["file_name", "caption_1"]):
            name = row["file_name"].strip()
            caps = [row.get(f"caption_{k}", "").strip() for k in range(1, 6)]
            caps = [c for c in caps if c]
            if name in seen:
                _dup(where, name, seen[name])
            seen[name] = where
            if len(caps) != 5:
                _handle(on_error, report, where, f"bad row: {len(caps)} captions (Clotho has 5)")
                continue
            info = _audio_info(audio_dir / name)
            if isinstance(info, str):
                _handle(on_error, report, where, info)
                continue
            m = meta.get(name, {})
            kws = [k.strip() for k in m.get("keywords", "").split(";") if k.strip()] or _keywords_from(caps)
            clips.append(
                CatalogClip(
                    id=f"clotho:{name}",
                    kind="background",
                    captions=caps,
                    keywords=kws,
                    path=str((audio_dir / name).resolve()),
                    duration=info[0],
                    sample_rate=info[1],
                    license=m.get("license", ""),
                    source="Clotho",
                )
            )
        return _validated(cls, "clotho", clips, report, validate, cache_dir, captions_csv)

    @classmethod
    def from_fsd50k(
        cls,
        labels_csv: str | Path,
        audio_dir: str | Path,
        on_error: str = "skip",
        validate: str = "lazy",
        cache_dir: str | Path | None = None,
    ) -> "Catalog":
        """FSD50K ground truth: `fname,labels,mids,split`; labels are AudioSet ontology names
        (comma-separated, underscores for spaces), most specific first."""
        return cls._from_labels(labels_csv, audio_dir, "fsd50k", "labels", on_error, validate, cache_dir)

    @classmethod
    def from_arca23k(
        cls,
        labels_csv: str | Path,
        audio_dir: str | Path,
        on_error: str = "skip",
        validate: str = "lazy",
        cache_dir: str | Path | None = None,
    ) -> "Catalog":
        """ARCA23K ground truth: `fname,label` with one AudioSet class per clip."""
        return cls._from_labels(labels_csv, audio_dir, "arca23k", "label", on_error, validate, cache_dir)

    @classmethod
    def _from_labels(cls, labels_csv, audio_dir, name, column, on_error, validate, cache_dir) -> "Catalog":
        labels_csv, audio_dir = Path(labels_csv), Path(audio_dir)
        _need_dir(audio_dir, labels_csv)
        report, clips = LoadReport(), []
        seen: dict[str, str] = {}
        for where, row in _rows(labels_csv, ["fname", column]):
            fname = row["fname"].strip()
            if fname in seen:
                _dup(where, fname, seen[fname])
            seen[fname] = where
            labels = [lab.strip() for lab in row[column].split(",") if lab.strip()]
            if not fname or not labels:
                _handle(on_error, report, where, "bad row: empty fname or labels")
                continue
            names = [lab.replace("_", " ") for lab in labels]
            path = audio_dir / (fname if Path(fname).suffix else f"{fname}.wav")
            info = _audio_info(path)
            if isinstance(info, str):
                _handle(on_error, report, where, info)
                continue
            caption = f"The sound of {names[0].lower()}" + (
                f" ({', '.join(n.lower() for n in names[1:4])})." if len(names) > 1 else "."
            )
            clips.append(
                CatalogClip(
                    id=f"{name}:{fname}",
                    kind="event",
                    captions=[caption],
                    keywords=[n.lower() for n in names][:8],
                    path=str(path.resolve()),
                    duration=info[0],
                    sample_rate=info[1],
                    type=labels[0],
                    license=row.get("license", ""),
                    source=name.upper(),
                )
            )
        return _validated(cls, name, clips, report, validate, cache_dir, labels_csv)


_STOP = set(
    "a an the of and or in on at to is are was were with by for from into over under as "
    "while then there it its this that be being been some someone something very".split()
)


def _keywords_from(captions: list[str], k: int = 6) -> list[str]:
    counts: dict[str, int] = {}
    for c in captions:
        for w in re.findall(r"[a-z]+", c.lower()):
            if w not in _STOP and len(w) > 2:
                counts[w] = counts.get(w, 0) + 1
    return [w for w, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:k]]


def _rows(path: Path, required: list[str]):
    try:
        f = open(path, newline="", encoding="utf-8")
    except OSError as err:
        raise CatalogError(f"{path}: cannot read: {err.strerror}") from None
    with f:
        reader = csv.DictReader(f)
        missing = [c for c in required if c not in (reader.fieldnames or [])]
        if missing:
            raise CatalogError(f"{path}: missing column(s) {missing} (has {reader.fieldnames})")
        for i, row in enumerate(reader, start=2):  # row 1 is the header
            if None in row:
                raise CatalogError(f"{path}: row {i}: more fields than the header")
            yield f"{path}: row {i}", row


def _dup(where: str, key: str, first: str) -> None:
    raise CatalogError(f"{where}: duplicate id {key!r} (first at {first.rsplit(': ', 1)[-1]})")


def _audio_info(path: Path):
    if not path.is_file():
        return f"missing audio file: {path}"
    try:
        info = sf.info(str(path))
    except (sf.LibsndfileError, RuntimeError) as err:
        return f"unreadable audio: {path} ({err})"
    if info.frames == 0:
        return f"empty audio: {path}"
    return float(info.duration), int(info.samplerate)


def _validated(
    cls, name: str, clips: list[CatalogClip], report: LoadReport, validate: str, cache_dir, source: Path
) -> Catalog:
    """The catalog of the clips whose audio passes `source_check` (now, or on first use if lazy)."""
    if validate not in VALIDATE_MODES:
        raise CatalogError(f"{source}: validate={validate!r} is not one of {VALIDATE_MODES}")
    checks = source_check.CheckCache(cache_dir, scope=str(Path(source).resolve()))
    if validate == "lazy":
        report.loaded = len(clips)
        return cls(name, clips, report, lazy={c.id: checks for c in clips})
    good, rejected = [], []
    for c in clips:
        reason, m = checks.reason(c.path, c.kind)
        if reason:
            rejected.append(
                {"clip_id": c.id, "path": c.path, "reason": reason, "kind": c.kind, "type": c.type}
            )
            report.skip(f"{name}: clip {c.id}", reason)
            continue
        c.duration, c.sample_rate = m["duration"], m["sample_rate"]
        good.append(c)
    checks.save()
    report.loaded = len(good)
    return cls(name, good, report, rejected)


def _need_dir(audio_dir: Path, csv: Path) -> None:
    """A missing audio folder would skip every row one by one and load an empty catalog."""
    if not audio_dir.is_dir():
        raise CatalogError(f"{csv}: its audio folder {audio_dir} is not a folder")


def _handle(on_error: str, report: LoadReport, where: str, reason: str) -> None:
    if on_error == "raise":
        raise CatalogError(f"{where}: {reason}")
    report.skip(where, reason)


def _reason(err: Exception) -> str:
    if isinstance(err, KeyError):
        return f"bad row: missing field {err.args[0]!r}"
    return str(err)
