"""`audit packets|score DIR`: honest-reader packets of the contrast families, and their score."""

from __future__ import annotations

from pathlib import Path

from casu_dataset.cli.common import int_in, long_flag


def add(sub) -> None:
    p = sub.add_parser(
        "audit",
        help="honest-reader packets of the contrast families (one view each, no keys) "
        "and the score of the readers' answers",
    )
    p.add_argument("action", choices=["packets", "score"])
    p.add_argument("dir", help="the packet folder (written by `packets`, read by `score`)")
    p.add_argument(
        "--scenarios", default=None, help="family folder/file (default: the shipped CASU-mini v2 families)"
    )
    p.add_argument("--families", default=None, help="packets: only these family ids (comma list)")
    p.add_argument("--per-packet", type=int_in(1), default=200, help="packets: items per packet file")
    p.add_argument("--out", default=None, help="score: also write the report here")
    p.set_defaults(fn=run, flag=long_flag)  # make_packets' `families` is --families


def run(args) -> int:
    """Honest-reader packets of the contrast families, and the score of the readers' answers."""
    from casu_dataset.families import audit as fa
    from casu_dataset.families.compile import DEFAULT_FAMILY_LIBRARY, compile_families

    if args.action == "packets":
        scenes = compile_families(args.scenarios or DEFAULT_FAMILY_LIBRARY)
        fams = [f.strip() for f in args.families.split(",") if f.strip()] if args.families else None
        counts = fa.write_packets(scenes, args.dir, per_packet=args.per_packet, families=fams)
        for name, n in counts.items():
            print(
                f"{args.dir}/packet_{name}.md: {n} items (reader: "
                f"READER_{'scene' if name.startswith('scene') else 'views'}.md)"
            )
        print(f"keys: {args.dir}/keys.json (for `audit score` only; never give it to a reader)")
        return 0
    res = fa.score(args.dir)
    report = fa.format_score(res)
    print(report)
    if args.out:
        Path(args.out).write_text(report + "\n")
    return 1 if res["problems"] else 0
