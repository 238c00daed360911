"""`demo --out DIR`: compose the example scenes."""

from __future__ import annotations

from pathlib import Path

from casu_dataset.cli.common import scene_flags, scripts
from casu_dataset.cli.compose import compose

EXAMPLES = Path(__file__).parents[1] / "scenarios" / "examples"


def add(sub) -> None:
    p = sub.add_parser("demo", help="compose the example scenes")
    p.add_argument("--out", default="demo_out")
    scene_flags(p)
    p.set_defaults(fn=run)


def run(args) -> int:
    print(f"demo: composing the example scenes in {EXAMPLES} -> {args.out}")
    rc = compose(args, scripts([str(EXAMPLES)]), check_speech=True)
    print(
        f"demo: wrote {len(list(Path(args.out).glob('*/mixture.wav')))} scenes under {args.out}/ "
        "(mixture.wav, stems/*.wav, annotation.json each)"
    )
    return rc
