"""The build's scene cache: each built scene stored under a content key of everything that
determines it (script, seed, mix settings, retrieval settings, catalog, voices, and the source of
the code that renders a scene), so an interrupted build resumes where it stopped and a rebuild
with the same inputs writes byte-identical files. A scene is written to a temp folder
(atomic.tmp_path) and renamed into place, its `done` file last, listing every other file's size
(entry_complete); `clean_scene_cache` removes the folders of killed writers."""

from __future__ import annotations

import functools
import hashlib
import json
import shutil
from pathlib import Path
from typing import NamedTuple

from casu_dataset import __version__
from casu_dataset.core import atomic, cache_layout
from casu_dataset.core.audio_io import encode_flac
from casu_dataset.core.content_key import content_key
from casu_dataset.families.family_build import build_family

BUILD_CACHE_VERSION = 1
# The code that turns a script into audio: a change to any of these files changes every scene
# key, so a mixer fix can never be served stale scenes from the cache. Retrieval and catalog
# code is in too: it decides which clip a layer gets; the contract holds the seeded streams.
RENDER_SOURCES = (
    "mix/mixer.py",
    "script/timeline.py",
    "core/loudness.py",
    "core/audio_io.py",
    "sounds/source_check.py",
    "mix/realize.py",
    "sounds/retrieval.py",
    "sounds/catalog.py",
    "contract.py",
    "core/rng.py",
    "speech/*.py",
    "families/family_build.py",
    "formats/lock.py",
    "mix/realize_locked.py",
    "mix/second_realization.py",
)
_CODE_ROOT = Path(__file__).parent.parent  # the casu_dataset package
STEMS = ("mixture", "background", "speech", "events")
DONE = "done"  # an entry's last file: {"sizes": {file: bytes}} of every other file
LEGACY_DONE = "ok"  # `done` before it held the sizes: complete when present, as then


@functools.lru_cache(maxsize=4)
def code_hash(root: Path = _CODE_ROOT) -> str:
    """sha256 over the RENDER_SOURCES under `root` (names and bytes); computed once per process."""
    h = hashlib.sha256()
    for pattern in RENDER_SOURCES:
        for f in sorted(root.glob(pattern)):
            h.update(f.relative_to(root).as_posix().encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()[:16]


_FINGERPRINT: list = [None, None, ""]  # the last catalog, what its fingerprint was made of, the fingerprint
FINGERPRINT_MEMO_MAX = 100_000  # clips; a bigger catalog is hashed each time (its state would be big)


def catalog_fingerprint(catalog) -> str:
    """`catalog.fingerprint()`, hashed again only when what it covers changed (a lazy catalog
    measures durations as it goes): every scene key needs it, and hashing a 400-clip catalog's
    JSON for each took more of a build's driver than planning its retrieval."""
    clips = getattr(catalog, "clips", None)
    if not isinstance(clips, list) or len(clips) > FINGERPRINT_MEMO_MAX:  # a stand-in, or huge: no memo
        return catalog.fingerprint()
    state = [(c.id, c.kind, c.type, tuple(c.captions), tuple(c.keywords), c.duration) for c in clips]
    last, last_state, fp = _FINGERPRINT
    if last is not catalog or last_state != state:
        fp = catalog.fingerprint()
        _FINGERPRINT[:] = [catalog, state, fp]
    return fp


def _render_inputs(scene, seed: int, builder) -> list:
    """What decides a rendered scene on this builder: the code, the script, the seed, the mix, the
    retrieval (model, weighting, catalog) and the voices and speech checks."""
    r = builder.retriever
    return [
        BUILD_CACHE_VERSION,
        __version__,
        code_hash(_CODE_ROOT),
        scene.script.to_dict(),
        int(seed),
        builder.mix_config.model_dump(mode="json"),
        r.alpha,
        r.embedder.model_name,
        catalog_fingerprint(r.catalog),
        [v.to_dict() for v in builder.registry.voices],
        builder.checker is not None,
        builder.max_wer,
    ]


def _index_settings(builder) -> list:
    """Big catalogs are searched through the faiss index: its settings decide the candidates too."""
    r = builder.retriever
    ann = r.index_settings() if hasattr(r, "index_settings") else None
    return [ann] if ann else []


def scene_key(scene, seed: int, builder, settings: dict | None = None) -> str:
    """`settings`: a contrast-family variant's shared {rng_key, turn_reserve, clip_gain}."""
    parts = _render_inputs(scene, seed, builder) + ([settings] if settings else [])
    return content_key(parts + _index_settings(builder), 32)


def build_scene(
    scene,
    seed: int,
    builder,
    cache_dir: Path,
    settings: dict | None = None,
    touched: list | None = None,
    where: dict | None = None,
) -> tuple[dict, bool]:
    """{annotation, flac: {mixture, background, speech, events}} for one scene, from cache if present.
    `touched` (a list) collects the cache keys used (the Ray executor ships those entries);
    `where` (a dict) gets the scene's cache folder under its id (stems_by_reference)."""
    d = cache_layout.scenes_dir(cache_dir) / scene_key(scene, seed, builder, settings)
    if touched is not None:
        touched.append(d.name)
    if where is not None:
        where[scene.script.id] = d
    if entry_complete(d):
        return _load_built(d), True
    return _store_built(d, builder.build(scene.script, seed, **(settings or {}))), False


def entry_complete(d: Path) -> bool:
    """Whether the cache entry `d` is complete: its `done` file lists every other file with the
    size it has. The files are not flushed to disk before the rename (a flush per scene would cost
    every build), so after an OS crash an entry can be in place with a file empty or short, or an
    empty `done`; such an entry counts as absent and is built again (_store replaces it)."""
    try:
        text = (d / DONE).read_text()
    except (OSError, UnicodeDecodeError):
        return False
    if text == LEGACY_DONE:
        return True
    try:
        sizes = json.loads(text)["sizes"]
        return bool(sizes) and all((d / f).stat().st_size == n for f, n in sizes.items())
    except (ValueError, KeyError, TypeError, AttributeError, OSError):
        return False


def done_text(files: dict[str, bytes]) -> str:
    """The `done` file of an entry holding `files`."""
    return json.dumps({"sizes": {f: len(b) for f, b in files.items()}}, sort_keys=True)


def _load_built(d: Path) -> dict:
    """{annotation, flac} of a cached scene folder."""
    return {
        "annotation": json.loads((d / "annotation.json").read_text()),
        "flac": {k: (d / f"{k}.flac").read_bytes() for k in STEMS},
    }


def _store_built(d: Path, res) -> dict:
    """Cache a MixResult in `d` and return its {annotation, flac} as a cache hit would (the
    annotation parsed from the JSON written, so a fresh build and a hit give the same value)."""
    flac = {"mixture": encode_flac(res.mixture), **{k: encode_flac(v) for k, v in res.stems.items()}}
    annotation = json.dumps(res.annotation, sort_keys=True).encode()
    _store(d, {"annotation.json": annotation, **{f"{k}.flac": b for k, b in flac.items()}})
    return {"annotation": json.loads(annotation), "flac": flac}


def _store(d: Path, files: dict[str, bytes]) -> None:
    """Write a scene's files to a temp folder, `done` last, and rename it to `d`."""
    tmp = atomic.tmp_path(d)
    tmp.mkdir(parents=True, exist_ok=True)
    for name, b in files.items():
        (tmp / name).write_bytes(b)
    (tmp / DONE).write_text(done_text(files))
    put_entry(tmp, d)


def put_entry(tmp: Path, d: Path) -> bool:
    """Rename the complete entry `tmp` to `d`, unless a complete `d` is there (a concurrent build
    finished the same key first: the same content); an incomplete one (an OS crash's) is replaced.
    True when `tmp` went in. A failed rename loses nothing: the caller has the content."""
    if entry_complete(d):
        shutil.rmtree(tmp, ignore_errors=True)
        return False
    if d.exists():
        broken = atomic.tmp_path(d.with_name(d.name + "-broken"))  # clean_scene_cache's if left
        try:
            d.replace(broken)
        except OSError:
            pass  # another build moved it first
        shutil.rmtree(broken, ignore_errors=True)
    try:
        tmp.replace(d)
    except OSError:  # another build's entry took the name meanwhile (or the folder is unwritable)
        shutil.rmtree(tmp, ignore_errors=True)
        return False
    return True


def build_locked_scene(
    scene, builder, cache_dir: Path, touched: list | None = None, where: dict | None = None
) -> tuple[dict, bool]:
    """A scene realized from the builder's lock (casu_dataset/dataset/lock.py), cached under a key of its
    lock entry and the rendering code: {annotation, flac, drift}."""
    from casu_dataset.mix.realize_locked import realize_locked

    entry = builder.lock.entry(scene.script.id)
    key = content_key(
        [
            "locked",
            BUILD_CACHE_VERSION,
            __version__,
            code_hash(_CODE_ROOT),
            entry,
            [v.to_dict() for v in builder.registry.voices],
        ],
        32,
    )
    d = cache_layout.scenes_dir(cache_dir) / key
    if touched is not None:
        touched.append(d.name)
    if where is not None:
        where[scene.script.id] = d
    if entry_complete(d):
        flac = {k: (d / f"{k}.flac").read_bytes() for k in STEMS}
        return {
            "annotation": entry["annotation"],
            "flac": flac,
            "drift": json.loads((d / "drift.json").read_text()),
        }, True
    ann, flac, drift = realize_locked(scene, entry, builder)
    _store(
        d,
        {
            "drift.json": json.dumps(drift.to_dict(), sort_keys=True).encode(),
            **{f"{k}.flac": b for k, b in flac.items()},
        },
    )
    return {"annotation": ann, "flac": flac, "drift": drift.to_dict()}, False


def build_unit(
    unit: list,
    seed: int,
    builder,
    cache_dir: Path,
    touched: list | None = None,
    where: dict | None = None,
) -> dict[str, tuple[dict, bool]]:
    """scene id -> (built, cache hit) for a unit; a family shares timeline, levels and clip gain.
    A builder with a lock realizes every scene from it (no retrieval, Whisper or gain decision);
    a realization-2 builder without one builds realization 2 (build_unit_other_recordings).
    `where` (a dict) gets each scene's cache folder under its id."""
    if getattr(builder, "lock", None) is not None:
        return {s.script.id: build_locked_scene(s, builder, cache_dir, touched, where) for s in unit}
    if getattr(builder, "realization", 1) == 2:
        return build_unit_other_recordings(unit, seed, builder, cache_dir, touched, where)
    return _build_unit_first_realization(unit, seed, builder, cache_dir, touched, where)


def _build_unit_first_realization(
    unit: list, seed: int, builder, cache_dir: Path, touched: list | None = None, where: dict | None = None
):
    """Realization 1 of a unit without a lock: each layer on the clip retrieval picks for it (near
    ties drawn from the seed); a family's variants are built together (build_family)."""
    if getattr(unit[0], "family_id", ""):
        out = build_family(
            unit, builder, seed, lambda v, st: build_scene(v, seed, builder, cache_dir, st, touched, where)
        )
    else:
        (scene,) = unit
        out = {scene.script.id: build_scene(scene, seed, builder, cache_dir, touched=touched, where=where)}
    marker = _unit_marker(unit, seed, builder, cache_dir)
    if not marker.is_file():
        atomic.write_text(marker, "ok")
    return out


def _unit_marker(unit: list, seed: int, builder, cache_dir: Path) -> Path:
    """A file whose presence says every scene of the unit is in the cache (realization 1), keyed
    on what decides them all: the driver skips planning the retrieval of such a unit."""
    parts = ["unit", *[_render_inputs(s, seed, builder) for s in unit]]
    return cache_layout.scenes_dir(cache_dir) / f"unit-{content_key(parts + _index_settings(builder), 32)}"


def unit_built(unit: list, seed: int, builder, cache_dir: Path) -> bool:
    """Whether realization 1 of `unit` was built into this cache before (its scenes load from it)."""
    return _unit_marker(unit, seed, builder, cache_dir).is_file()


def reference_unit(
    unit: list, seed: int, builder, cache_dir: Path, touched: list | None = None
) -> dict[str, tuple[dict, list[int] | None]]:
    """scene id -> (realization 1's annotation, its locked turn lengths or None): from realization
    1's lock when the builder has one (`builder.reference`), else realization 1 built here (cached)."""
    ref = getattr(builder, "reference", None)
    if ref is not None:
        out: dict[str, tuple[dict, list[int] | None]] = {}
        for s in unit:
            e = ref.entry(s.script.id)
            out[s.script.id] = (e["annotation"], [t["samples"] for t in e["turns"]])
        return out
    return {
        sid: (b["annotation"], None)
        for sid, (b, _) in _build_unit_first_realization(unit, seed, builder, cache_dir, touched).items()
    }


def other_recordings_key(scene, seed: int, builder, refs: dict) -> str:
    """The cache key of a realization-2 scene: what decides realization 1 (every variant of the
    unit: a family shares one non-speech headroom), the scene's bank types and this build's retrieval."""
    parts = [
        "realization2",
        *_render_inputs(scene, seed, builder),
        getattr(scene, "types", None) or {},
        {sid: content_key(list(ref), 32) for sid, ref in sorted(refs.items())},
    ]
    return content_key(parts + _index_settings(builder), 32)


def build_unit_other_recordings(
    unit: list, seed: int, builder, cache_dir: Path, touched: list | None = None, where: dict | None = None
) -> dict[str, tuple[dict, bool]]:
    """Realization 2 of a unit (casu_dataset/mix/second_realization.py): scene id -> ({annotation, flac},
    cache hit). The variants of a family are prepared together (they share one non-speech headroom)."""
    from casu_dataset.mix import second_realization as other_recordings

    refs = reference_unit(unit, seed, builder, cache_dir, touched)
    dirs = {
        s.script.id: cache_layout.scenes_dir(cache_dir) / other_recordings_key(s, seed, builder, refs)
        for s in unit
    }
    if touched is not None:
        touched.extend(d.name for d in dirs.values())
    if where is not None:
        where.update(dirs)
    if all(entry_complete(d) for d in dirs.values()):
        return {sid: (_load_built(d), True) for sid, d in dirs.items()}

    def named(scene, fn, *args):
        try:
            return fn(*args)
        except other_recordings.SecondRealizationError:
            raise
        except Exception as err:  # a failed mix check, an unreadable clip: named with the scene
            raise other_recordings.SecondRealizationError(
                f"{other_recordings.where(scene)}: realization 2: {type(err).__name__}: {err}"
            ) from err

    prepared = [named(s, other_recordings.prepare, builder, s, seed, *refs[s.script.id]) for s in unit]
    fam = other_recordings.family_headroom(prepared, builder.mix_config.peak_limit)
    out = {}
    for p in prepared:
        sid = p.scene.script.id
        res = named(p.scene, other_recordings.render, builder, p, fam)
        other_recordings.check_same_timeline(p.ann1, res.annotation)
        out[sid] = (_store_built(dirs[sid], res), False)
    return out


class StemFile(NamedTuple):
    """A stem as a worker on the driver's machine sends it: the scene-cache file that holds it. The
    driver reads it back (stems_loaded), one copy from the page cache, instead of receiving the
    bytes pickled through a pipe or Ray's object store (three copies, on both processes' CPUs)."""

    path: str
    size: int


def stems_by_reference(built: dict | None, where: dict) -> dict | None:
    """`built` (build_unit's, `where` filled by the same call) with each stem given as its cache
    file (StemFile) where the scene's folder is complete and the file has the stem's size; any
    other stem stays bytes. The cache is content-keyed: a complete folder holds what every build
    of its key writes, so reading it gives what a cache hit gives."""
    if built is None:
        return None
    out = {}
    for sid, (b, hit) in built.items():
        d = where.get(sid)
        folder = d if d is not None and entry_complete(d) else None
        flac: dict = {}
        for stem, data in b["flac"].items():
            f = folder / f"{stem}.flac" if folder is not None else None
            try:
                same = f is not None and f.stat().st_size == len(data)
            except OSError:
                same = False
            flac[stem] = StemFile(str(f), len(data)) if same else data
        out[sid] = ({**b, "flac": flac}, hit)
    return out


def stems_loaded(built: dict | None) -> dict | None:
    """`built` with every StemFile read back as bytes; None when one is gone or is not the size it
    was (the caller then builds the unit itself, from the cache, as for a unit its worker failed)."""
    if built is None:
        return None
    out = {}
    for sid, (b, hit) in built.items():
        flac = {}
        for stem, v in b["flac"].items():
            if isinstance(v, StemFile):
                try:
                    data = Path(v.path).read_bytes()
                except OSError:
                    return None
                if len(data) != v.size:
                    return None
                v = data
            flac[stem] = v
        out[sid] = ({**b, "flac": flac}, hit)
    return out


def clean_scene_cache(cache_dir: Path) -> list[Path]:
    """Remove the temp folders of scene writes whose process is gone (killed builds)."""
    return atomic.clean_stale(cache_layout.scenes_dir(cache_dir).glob(atomic.TMP_GLOB))
