"""`build --out DIR`: the dataset folder (parquet + dataset card), through casu_dataset.api.build."""

from __future__ import annotations

import sys
import time

from casu_dataset.api import build
from casu_dataset.cli.common import int_in, scene_flags
from casu_dataset.contract import mcq_configs
from casu_dataset.core.errors import Field
from casu_dataset.dataset.config import BuildConfig

#: the flag of each BuildConfig field (and of the field values that have a flag of their own)
FLAGS = {
    "out": "--out",
    "scenarios": "--scenarios",
    "seed": "--seed",
    "cache": "--cache",
    "alpha": "--alpha",
    "embedding_model": "--embedding-model",
    "duration": "--duration",
    "catalogs": "--catalog",
    "num_shards": "--num-shards",
    "shard_index": "--shard-index",
    "num_proc": "--num-proc",
    "executor": "--executor",
    "ray_address": "--ray-address",
    "ray_num_gpus": "--ray-num-gpus",
    "lock=relock": "--relock",
    "lock=ignore": "--no-lock",
    "check_speech=False": "--no-check-speech",
    "check_speech": "--no-check-speech",
    "name": "--name",
    "max_skips": "--max-skips",
    "max_skips=None": "--allow-skips",
    "realization": "--realization",
}


def flag(f: Field) -> str:
    """A config field as the user typed it: `--executor ray` for executor=ray."""
    return FLAGS.get(str(f)) or f"{FLAGS.get(f.name, f.name)} {f.value}"


def add(sub) -> None:
    p = sub.add_parser("build", help="build the dataset folder (parquet + dataset card)")
    p.add_argument("--out", required=True)
    p.add_argument(
        "--scenarios",
        default="default",
        help="family or scenario folder/file; 'default' or 'v2': the CASU-mini v2 contrast families; "
        "'v1': the old CASU-mini scenarios",
    )
    p.add_argument(
        "--num-shards", type=int_in(1), default=1, help="split the build into N deterministic slices"
    )
    p.add_argument("--shard-index", type=int_in(0), default=0, help="which slice to build (0..N-1)")
    p.add_argument("--num-proc", type=int_in(1), default=1, help="worker processes on this machine")
    p.add_argument(
        "--executor",
        choices=["local", "ray"],
        default="local",
        help="local: this machine (--num-proc); ray: one Ray task per scene or family (pip install "
        "-e '.[ray]'); the output is byte-identical either way",
    )
    p.add_argument(
        "--ray-address",
        default=None,
        help="a running Ray cluster (e.g. HEAD_IP:6379 or 'auto'); default: start a local one",
    )
    p.add_argument(
        "--ray-num-gpus",
        type=float,
        default=None,
        help="GPUs per Ray task (fractions share a GPU); default: 1 when a voice uses a GPU TTS "
        "engine (kokoro, zonos), else 0",
    )
    p.add_argument("--no-check-speech", action="store_true", help="skip the Whisper intelligibility check")
    lk = p.add_mutually_exclusive_group()
    lk.add_argument(
        "--relock",
        action="store_true",
        help="make every decision afresh and write the library's realization lock from this build "
        "(a new or edited library); by default a library's lock is followed",
    )
    lk.add_argument(
        "--no-lock",
        action="store_true",
        help="ignore the library's realization lock: decisions are made on this machine",
    )
    p.add_argument(
        "--realization",
        type=int,
        choices=[1, 2],
        default=1,
        help="1: the dataset. 2: its second realization for the recording-robustness metric: the same "
        "items (same ids, questions, keys, speech and timelines) with every non-speech layer (background, "
        "events, slot fills) on another recording of the same bank type than realization 1's. Built on "
        "request only; it has its own lock, realization2.lock.jsonl beside the first (--relock writes "
        "it), and is named 'NAME (realization 2)'. A layer whose type has a single recording is an "
        "error naming family, layer and type (--max-skips N builds without those families)",
    )
    p.add_argument("--record-command", action="store_true", help="write the exact command line into the card")
    p.add_argument(
        "--name",
        default=None,
        help="dataset name for the card (default: CASU-mini for the shipped "
        "library, else the scenario folder's or file's name)",
    )
    p.add_argument(
        "--allow-skips", action="store_true", help="write the dataset even when scenes were skipped"
    )
    p.add_argument(
        "--max-skips",
        type=int_in(0),
        default=None,
        help="write the dataset when at most N scenes were skipped (default 0: any skip fails the build)",
    )
    p.add_argument(
        "--catalog",
        action="append",
        default=None,
        help="sound catalog (repeatable, merged): embedded (default), a manifest.json, "
        "clotho:CSV:AUDIO_DIR[:META], fsd50k:CSV:AUDIO_DIR or arca23k:CSV:AUDIO_DIR",
    )
    scene_flags(p)
    p.set_defaults(fn=run, flag=flag)


def config(args) -> BuildConfig:
    command = (
        "python -m casu_dataset " + " ".join(sys.argv[1:])
        if args.record_command
        else "python -m casu_dataset build"
    )
    return BuildConfig(
        out=args.out,
        scenarios=args.scenarios,
        seed=args.seed,
        cache=args.cache,
        alpha=args.alpha,
        embedding_model=args.embedding_model,
        duration=args.duration,
        check_speech=not args.no_check_speech,
        catalogs=tuple(args.catalog or ["embedded"]),
        num_shards=args.num_shards,
        shard_index=args.shard_index,
        num_proc=args.num_proc,
        executor=args.executor,
        ray_address=args.ray_address,
        ray_num_gpus=args.ray_num_gpus,
        lock="relock" if args.relock else "ignore" if args.no_lock else "follow",
        name=args.name,
        max_skips=None if args.allow_skips else (args.max_skips or 0),
        command=command,
        realization=args.realization,
    )


def run(args) -> int:
    from casu_dataset.cli.clock import T0

    t_cmd = time.perf_counter()
    cfg = config(args)
    res = build(cfg)
    r = res.realization
    if r is not None:
        print(
            f"realization: {r['reproduced']}/{r['scenes']} scenes reproduced the reference bytes, "
            f"{r['drifted']} drifted (max stem loudness diff {r['max_stem_lufs_diff']:.4f} LU, TTS conformed "
            f"by at most {r['max_turn_samples_conformed']} samples)"
            + "".join(f"\n  drifted {d}" for d in r["drifted_scenes"][:20])
        )
    elif res.lock:
        print(f"wrote the realization lock {res.lock_file} ({res.lock['sha256'][:16]})")
    print(f"dataset identity {(res.identity or {}).get('sha256', '?')[:16]}")
    s = res.seconds
    print(
        f"built {len(res.built)} scenes ({res.cached} from cache), skipped {len(res.skipped)} "
        f"in {s['build']:.1f} s: "
        + ", ".join(f"{k} {v:.1f} s" for k, v in s.items() if k not in ("setup", "build"))
    )
    wall = {
        "imports": t_cmd - T0,
        "setup (library, models, lock)": s["setup"],
        "scenes": s.get("prebuild", 0.0),
        "assemble": s.get("scenes", 0.0) - s.get("prebuild", 0.0),
        "write": s.get("write", 0.0),
    }
    total = time.perf_counter() - T0
    print(
        "  wall clock: "
        + " + ".join(f"{k} {v:.1f} s" for k, v in wall.items())
        + f" = {sum(wall.values()):.1f} s of {total:.1f} s"
    )
    if res.stage_seconds:
        procs = f"summed over {cfg.num_proc} worker processes" if cfg.num_proc > 1 else "this process"
        print(
            f"  scene stages ({procs}): "
            + ", ".join(f"{k} {v:.1f} s" for k, v in res.stage_seconds.items() if v)
        )
    for sk in res.skipped:
        print(f"  skipped {sk['scene_id']}: {sk['reason']}")
    print(
        f"dataset folder: {args.out} (load with datasets.load_dataset({str(args.out)!r}, "
        f"{mcq_configs()[0]!r}))"
    )
    return 0
