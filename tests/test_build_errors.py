"""Bad inputs to `python -m casu_dataset build` and its sibling commands (compose, regenerate,
merge, timeline, retrieval-eval, voices) and to the library's script timeline: flags out of
range, catalogs, scenario files and output folders that cannot be used, fills the bank cannot
serve. Each is refused before any work with a named error and the documented exit code, or
gives the right result; the rules are in tests/bad_input_corpus.py."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import yaml
from bad_input_corpus import (
    OK,
    ROOT,
    Ctx,
    E,
    Outcome,
    casu,
    check_case,
    duplicate_ids,
    expect_error,
)

FAMILY_FILE = ROOT / "casu_dataset" / "scenarios" / "casu_mini_v2"

# -- helpers that make one bad thing each -------------------------------------------------------


def timeline_case(offset: float):
    from casu_dataset.script.schema import load_script
    from casu_dataset.script.timeline import TimelineError, TimingConfig, resolve

    s = load_script(ROOT / "casu_dataset" / "scenarios" / "examples" / "storm_monologue.yaml")
    d = s.model_dump(mode="json")
    d["events"][1]["anchor"]["offset"] = offset
    s2 = type(s).model_validate(d)

    def run():
        tl = resolve(s2, [2.0, 3.0], [1.0, 1.5], np.random.default_rng(0), TimingConfig())
        return tl

    return expect_error(run, TimelineError)


def garbage_audio_dataset(c: Ctx) -> Path:
    import pyarrow as pa

    d = c.tmp / "garbage_audio"
    ann = {"scene_id": "s0", "sample_rate": 16000, "turns": [], "events": []}
    row = {
        "scene_id": "s0",
        "audio": {"bytes": b"not audio at all", "path": "s0.flac"},
        "annotation": json.dumps(ann),
    }
    (d / "scenes").mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist([row]), d / "scenes" / "test-00000-of-00001.parquet")
    return d


def merge_case(c: Ctx, kind: str) -> Outcome:
    d = c.tmp / "shard"
    d.mkdir()
    if kind == "no_report":
        (d / "hello.txt").write_text("hi")
    elif kind == "bad_json":
        (d / "build_report.json").write_text("{not json")
    elif kind == "no_settings":
        (d / "build_report.json").write_text(json.dumps({"built": []}))
    elif kind == "list":
        (d / "build_report.json").write_text("[1, 2]")
    return casu("merge", "--out", str(c.tmp / "merged"), str(d))


def regenerate_case(c: Ctx, kind: str) -> Outcome:
    f = c.tmp / "annotation.json"
    if kind == "not_json":
        f.write_text("{{{")
    elif kind == "not_casu":
        f.write_text(json.dumps({"hello": 1}))
    elif kind == "list":
        f.write_text("[]")
    elif kind == "dir":
        f.mkdir()
    return casu("regenerate", str(f))


def timeline_cli(c: Ctx, kind: str) -> Outcome:
    if kind == "garbage_audio":
        d = garbage_audio_dataset(c)
        return casu("timeline", "--dataset", str(d), "--scene", "s0", "--out", str(c.tmp / "t.png"))
    if kind == "missing":
        return casu(
            "timeline", "--dataset", str(c.tmp / "nope"), "--scene", "s0", "--out", str(c.tmp / "t.png")
        )
    if kind == "no_scene":
        d = garbage_audio_dataset(c)
        return casu("timeline", "--dataset", str(d), "--scene", "other", "--out", str(c.tmp / "t.png"))
    if kind == "bad_annotation":
        import pyarrow as pa

        from casu_dataset.core.audio_io import encode_flac

        d = c.tmp / "bad_ann"
        (d / "scenes").mkdir(parents=True)
        row = {
            "scene_id": "s0",
            "audio": {"bytes": encode_flac(np.zeros(1600, "float32")), "path": "x"},
            "annotation": "{not json",
        }
        pq.write_table(pa.Table.from_pylist([row]), d / "scenes" / "test-00000-of-00001.parquet")
        return casu("timeline", "--dataset", str(d), "--scene", "s0", "--out", str(c.tmp / "t.png"))
    raise ValueError(kind)


def build(c: Ctx, *argv) -> Outcome:
    return casu("build", "--out", str(c.tmp / "built"), *argv)


def bank_manifest(c: Ctx, reject_type: str | None = None, reject_n: int = 0) -> Path:
    """The embedded bank as a manifest with absolute paths; clips of `reject_type` (or the first
    `reject_n` clips) point to a silent file, so the catalog rejects them when it loads."""
    from casu_dataset.core.audio_io import write_wav
    from casu_dataset.sounds.bank import bank_dir

    m = json.loads((bank_dir() / "manifest.json").read_text())
    silent = c.tmp / "silent.wav"
    write_wav(silent, np.zeros(32000, np.float32), 16000)
    n = 0
    for clip in m["clips"]:
        clip["file"] = str((bank_dir() / clip["file"]).resolve())
        if (reject_type and clip.get("type") == reject_type) or n < reject_n:
            clip["file"] = str(silent)
            n += 1
    out = c.tmp / "manifest.json"
    out.write_text(json.dumps(m))
    return out


def family_file(c: Ctx, fill_type: str | None = None) -> tuple[Path, str]:
    """One shipped family (its first), optionally with its first fill's type changed."""
    src = sorted(FAMILY_FILE.glob("*.yaml"))[0]
    fam = yaml.safe_load(src.read_text())[0]
    first = next(iter(fam["fills"].values()))
    old = first["type"]
    if fill_type:
        first["type"] = fill_type
    f = c.tmp / "fam.yaml"
    f.write_text(yaml.safe_dump([fam], sort_keys=False))
    return f, old


def quick_build(c: Ctx, *argv) -> Outcome:
    """`build` with --no-check-speech: no speech-recognition model is loaded for these cases."""
    return casu("build", "--out", str(c.tmp / "built"), "--no-check-speech", *argv)


def catalog_case(c: Ctx, kind: str) -> Outcome:
    if kind == "missing":
        spec = str(c.tmp / "nope.json")
    elif kind == "missing-audio":
        m = c.tmp / "m.json"
        m.write_text(
            json.dumps(
                {
                    "clips": [
                        {
                            "id": "x",
                            "kind": "event",
                            "caption": "a bell",
                            "keywords": ["bell"],
                            "file": "no_such.wav",
                        }
                    ]
                }
            )
        )
        spec = str(m)
    elif kind == "truncated":
        (c.tmp / "m.json").write_text('{"clips": [{"id": "x", "kind": ')
        spec = str(c.tmp / "m.json")
    elif kind == "list":
        (c.tmp / "m.json").write_text("[1, 2]")
        spec = str(c.tmp / "m.json")
    elif kind == "latin1":
        (c.tmp / "m.json").write_bytes('{"name": "caf\xe9", "clips": []}'.encode("latin-1"))
        spec = str(c.tmp / "m.json")
    elif kind == "empty":
        (c.tmp / "m.json").write_text('{"clips": []}')
        spec = str(c.tmp / "m.json")
    elif kind == "all-rejected":
        spec = str(bank_manifest(c, reject_n=10**6))
    elif kind == "clotho-spec":
        spec = "clotho:only_one_part"
    elif kind == "clotho-no-csv":
        (c.tmp / "audio").mkdir()
        spec = f"clotho:{c.tmp / 'nope.csv'}:{c.tmp / 'audio'}"
    elif kind == "clotho-no-audio-dir":
        (c.tmp / "cap.csv").write_text(
            "file_name,caption_1,caption_2,caption_3,caption_4,caption_5\na.wav,x,y,z,w,v\n"
        )
        spec = f"clotho:{c.tmp / 'cap.csv'}:{c.tmp / 'no_audio_here'}"
    elif kind == "fsd-missing-column":
        (c.tmp / "audio").mkdir()
        (c.tmp / "dev.csv").write_text("fname,other\n1,x\n")
        spec = f"fsd50k:{c.tmp / 'dev.csv'}:{c.tmp / 'audio'}"
    else:
        raise ValueError(kind)
    return quick_build(c, "--catalog", spec)


def scenarios_non_utf8(c: Ctx, family: bool) -> Outcome:
    f, _ = family_file(c)
    text = f.read_text() if family else "- id: x\n  place: caf\xe9\n"
    f.write_bytes((text + "# caf\xe9\n").encode("latin-1"))
    return quick_build(c, "--scenarios", str(f))


def out_case(c: Ctx, kind: str, cmd: str = "build") -> Outcome:
    if kind == "under-file":
        (c.tmp / "f").write_text("x")
        out = c.tmp / "f" / "sub"
    elif kind == "proc":
        out = Path("/proc/casu_out")
    elif kind == "loop":
        (c.tmp / "a").symlink_to(c.tmp / "b")
        (c.tmp / "b").symlink_to(c.tmp / "a")
        out = c.tmp / "a"
    elif kind == "dangling":
        (c.tmp / "d").symlink_to(c.tmp / "nowhere" / "x")
        out = c.tmp / "d"
    else:
        raise ValueError(kind)
    if cmd == "compose":
        return casu(
            "compose", str(ROOT / "casu_dataset/scenarios/examples/cafe_order.yaml"), "--out", str(out)
        )
    if cmd == "merge":
        return casu("merge", "--out", str(out), str(c.tmp))
    return casu("build", "--out", str(out))


def fill_type_case(c: Ctx) -> Outcome:
    f, _ = family_file(c, "no_such_bank_type")
    return quick_build(c, "--scenarios", str(f))


def rejected_intended_case(c: Ctx) -> Outcome:
    f, old = family_file(c)
    return quick_build(c, "--scenarios", str(f), "--catalog", str(bank_manifest(c, reject_type=old)))


def rejected_counted(c: Ctx) -> Outcome:
    """8 rejected clips are in build_report.json's settings and in the card text."""
    from casu_dataset.dataset.build import build_settings
    from casu_dataset.families.preflight import rejected_text
    from casu_dataset.mix.realize import make_builder

    b = make_builder(
        {
            "catalogs": [str(bank_manifest(c, reject_n=8))],
            "check_speech": False,
            "duration": None,
            "cache": str(c.tmp / "cache"),
        }
    )
    st = build_settings(b, 0, "x")
    n = st["catalog_rejected"]["rejected"]
    text = rejected_text(st["catalog_rejected"])
    ok = n == 8 and "Catalog clips rejected: 8" in text and text.count("silent") >= 8
    return Outcome(0 if ok else 1, f"{n} rejected; card: {text[:300]}")


# -- the corpus: (id, run(ctx) -> Outcome, expectation) ----------------------------------------

CASES = [
    # build flags, and the sibling commands' flags and files
    (
        "build-scenarios-missing",
        lambda c: build(c, "--scenarios", str(c.tmp / "nope.yaml")),
        (E, 2, "--scenarios", "no such file"),
    ),
    (
        "build-scenarios-garbage",
        lambda c: (c.tmp / "g.yaml").write_text("a: [") and build(c, "--scenarios", str(c.tmp / "g.yaml")),
        (E, 2, "g.yaml"),
    ),
    (
        "build-shard-index-out-of-range",
        lambda c: build(c, "--shard-index", "5", "--num-shards", "2"),
        (E, 2, "--shard-index 5", "0..1"),
    ),
    (
        "build-shard-index-negative",
        lambda c: build(c, "--shard-index", "-1"),
        (E, 2, "--shard-index", ">= 0"),
    ),
    ("build-num-shards-0", lambda c: build(c, "--num-shards", "0"), (E, 2, "--num-shards", ">= 1")),
    ("build-num-shards-text", lambda c: build(c, "--num-shards", "two"), (E, 2, "--num-shards", "'two'")),
    ("build-num-proc-0", lambda c: build(c, "--num-proc", "0"), (E, 2, "--num-proc", ">= 1")),
    ("build-alpha-5", lambda c: build(c, "--alpha", "5"), (E, 2, "--alpha", "0..1")),
    ("build-alpha-negative", lambda c: build(c, "--alpha", "-0.1"), (E, 2, "--alpha", "0..1")),
    ("build-alpha-nan", lambda c: build(c, "--alpha", "nan"), (E, 2, "--alpha", "0..1")),
    ("build-alpha-text", lambda c: build(c, "--alpha", "high"), (E, 2, "--alpha", "'high'")),
    ("build-duration-0", lambda c: build(c, "--duration", "0"), (E, 2, "--duration", "> 0")),
    ("build-duration-too-long", lambda c: build(c, "--duration", "999"), (E, 2, "--duration", "<= 30")),
    ("build-seed-text", lambda c: build(c, "--seed", "x"), (E, 2, "--seed", "'x'")),
    ("build-seed-negative", lambda c: build(c, "--seed", "-1"), (E, 2, "--seed", ">= 0")),
    ("build-max-skips-negative", lambda c: build(c, "--max-skips", "-1"), (E, 2, "--max-skips", ">= 0")),
    (
        "build-out-is-file",
        lambda c: (c.tmp / "built").write_text("x") and build(c),
        (E, 2, "--out", "is a file"),
    ),
    (
        "compose-alpha-5",
        lambda c: casu(
            "compose",
            str(ROOT / "casu_dataset/scenarios/examples/cafe_order.yaml"),
            "--out",
            str(c.tmp / "o"),
            "--alpha",
            "5",
        ),
        (E, 2, "--alpha", "0..1"),
    ),
    (
        "compose-missing-script",
        lambda c: casu("compose", str(c.tmp / "nope.yaml"), "--out", str(c.tmp / "o")),
        (E, 2, "nope.yaml"),
    ),
    (
        "regenerate-missing-file",
        lambda c: regenerate_case(c, "missing"),
        (E, 2, "annotation.json", "cannot read"),
    ),
    ("regenerate-not-json", lambda c: regenerate_case(c, "not_json"), (E, 2, "annotation.json")),
    (
        "regenerate-not-casu",
        lambda c: regenerate_case(c, "not_casu"),
        (E, 2, "annotation.json", "not a CASU scene annotation"),
    ),
    ("regenerate-json-list", lambda c: regenerate_case(c, "list"), (E, 2, "annotation.json")),
    ("regenerate-folder", lambda c: regenerate_case(c, "dir"), (E, 2, "annotation.json")),
    ("merge-non-casu-folder", lambda c: merge_case(c, "no_report"), (E, 1, "not a CASU build folder")),
    (
        "merge-missing-folder",
        lambda c: casu("merge", "--out", str(c.tmp / "m"), str(c.tmp / "nope")),
        (E, 1, "nope"),
    ),
    ("merge-bad-report-json", lambda c: merge_case(c, "bad_json"), (E, 1, "build_report.json")),
    ("merge-report-without-settings", lambda c: merge_case(c, "no_settings"), (E, 1, "build_report.json")),
    ("merge-report-a-list", lambda c: merge_case(c, "list"), (E, 1, "build_report.json")),
    ("timeline-garbage-audio", lambda c: timeline_cli(c, "garbage_audio"), (E, 2, "s0", "undecodable audio")),
    ("timeline-missing-dataset", lambda c: timeline_cli(c, "missing"), (E, 2, "--dataset")),
    ("timeline-unknown-scene", lambda c: timeline_cli(c, "no_scene"), (E, 2, "--scene 'other'")),
    ("timeline-bad-annotation", lambda c: timeline_cli(c, "bad_annotation"), (E, 2, "s0", "annotation")),
    (
        "retrieval-eval-alphas-text",
        lambda c: casu("retrieval-eval", "--alphas", "0,x"),
        (E, 2, "--alphas", "'x'"),
    ),
    (
        "retrieval-eval-alphas-range",
        lambda c: casu("retrieval-eval", "--alphas", "0,5"),
        (E, 2, "--alphas", "0..1"),
    ),
    (
        "voices-sentences-negative",
        lambda c: casu("voices", "--sentences", "-1"),
        (E, 2, "--sentences", ">= 0"),
    ),
    # the script timeline: a during_turn offset past its turn is an error naming the event, not moved
    (
        "during-turn-offset-50s",
        lambda c: timeline_case(50.0),
        (E, 2, "events[1] (cow)", "offset 50", "turn 1"),
    ),
    ("during-turn-offset-past-end", lambda c: timeline_case(3.5), (E, 2, "events[1] (cow)", "offset 3.5")),
    (
        "during-turn-offset-fits",
        lambda c: (lambda o: Outcome(0 if o.code == 0 else 1, o.out))(timeline_case(1.0)),
        (OK,),
    ),
    # build: catalogs, scenario files, output folders, fills
    (
        "build-catalog-missing-manifest",
        lambda c: catalog_case(c, "missing"),
        (E, 2, "--catalog", "nope.json"),
    ),
    (
        "build-catalog-missing-audio",
        lambda c: catalog_case(c, "missing-audio"),
        (E, 2, "--catalog", "missing audio file"),
    ),
    ("build-catalog-truncated-json", lambda c: catalog_case(c, "truncated"), (E, 2, "--catalog", "m.json")),
    ("build-catalog-json-list", lambda c: catalog_case(c, "list"), (E, 2, "m.json", "'clips' list")),
    ("build-catalog-latin1", lambda c: catalog_case(c, "latin1"), (E, 2, "--catalog", "m.json")),
    ("build-catalog-no-clips", lambda c: catalog_case(c, "empty"), (E, 2, "--catalog", "no usable")),
    (
        "build-catalog-all-clips-rejected",
        lambda c: catalog_case(c, "all-rejected"),
        (E, 2, "--catalog", "no usable", "silent"),
    ),
    (
        "build-catalog-clotho-spec",
        lambda c: catalog_case(c, "clotho-spec"),
        (E, 2, "--catalog 'clotho:only_one_part'"),
    ),
    (
        "build-catalog-clotho-no-csv",
        lambda c: catalog_case(c, "clotho-no-csv"),
        (E, 2, "--catalog", "nope.csv"),
    ),
    (
        "build-catalog-clotho-no-audio-dir",
        lambda c: catalog_case(c, "clotho-no-audio-dir"),
        (E, 2, "no_audio_here", "not a folder"),
    ),
    (
        "build-catalog-fsd-missing-column",
        lambda c: catalog_case(c, "fsd-missing-column"),
        (E, 2, "dev.csv", "missing column"),
    ),
    ("build-scenarios-family-latin1", lambda c: scenarios_non_utf8(c, True), (E, 2, "fam.yaml", "UTF-8")),
    ("build-scenarios-v1-latin1", lambda c: scenarios_non_utf8(c, False), (E, 2, "fam.yaml", "UTF-8")),
    ("build-out-under-file", lambda c: out_case(c, "under-file"), (E, 2, "--out", "is a file")),
    ("build-out-under-proc", lambda c: out_case(c, "proc"), (E, 2, "--out /proc/casu_out", "cannot write")),
    ("build-out-symlink-loop", lambda c: out_case(c, "loop"), (E, 2, "--out")),
    ("build-out-dangling-symlink", lambda c: out_case(c, "dangling"), (E, 2, "--out", "symlink")),
    ("compose-out-under-file", lambda c: out_case(c, "under-file", "compose"), (E, 2, "--out", "is a file")),
    ("merge-out-under-proc", lambda c: out_case(c, "proc", "merge"), (E, 2, "--out", "cannot write")),
    ("build-fill-unknown-bank-type", fill_type_case, (E, 1, "no_such_bank_type", "fam")),
    ("build-intended-clips-rejected", rejected_intended_case, (E, 1, "rejected", "silent")),
    ("build-rejected-clips-counted", rejected_counted, (OK,)),
]


def test_case_ids_are_unique():
    assert duplicate_ids(CASES) == []


@pytest.mark.parametrize("case_id, run, expect", CASES, ids=[c[0] for c in CASES])
def test_bad_input(corpus_ctx, tmp_path, case_id, run, expect):
    check_case(corpus_ctx, tmp_path, case_id, run, expect)
