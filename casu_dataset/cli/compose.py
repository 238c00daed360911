"""`compose SCRIPT... --out DIR`: build scenes from script files or folders."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from casu_dataset.cli.common import builder, check_out, error, scene_flags, scripts


def add(sub) -> None:
    p = sub.add_parser("compose", help="build scenes from script files or folders")
    p.add_argument("scripts", nargs="+", help="scene script files (.yaml/.json) or folders")
    p.add_argument("--out", required=True, help="output folder; one sub-folder per scene")
    p.add_argument("--check-speech", action="store_true", help="run the Whisper intelligibility check")
    scene_flags(p)
    p.set_defaults(fn=run)


def run(args) -> int:
    return compose(args, scripts(args.scripts), args.check_speech)


def compose(args, items, check_speech: bool) -> int:
    why = check_out(args.out)
    if why:
        error(why)
        return 2
    b = builder(args, check_speech)
    out = Path(args.out)
    failed = 0
    for path, script in items:
        t = time.perf_counter()
        try:
            res = b.build(script, args.seed)
        except Exception as err:  # one bad scene does not stop the others
            failed += 1
            print(f"skip {path}: {type(err).__name__}: {err}", file=sys.stderr)
            continue
        d = res.write(out / script.id)
        a = res.annotation
        print(
            f"{script.id}: {a['duration']:.1f} s, bed {a['background']['clip_id']}, "
            f"events {[e['clip_id'] for e in a['events']]}, voices "
            f"{ {k: v['id'] for k, v in a['extra']['speech']['voices'].items()} } -> {d} "
            f"({time.perf_counter() - t:.1f} s)"
        )
    return 1 if failed else 0
