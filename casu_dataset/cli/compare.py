"""`compare REFERENCE BUILD`: how a build's audio differs from a reference build of the same library."""

from __future__ import annotations

from pathlib import Path

from casu_dataset.cli.common import error


def add(sub) -> None:
    p = sub.add_parser(
        "compare", help="how a build's audio differs from a reference build of the same library"
    )
    p.add_argument("reference", help="the reference build folder")
    p.add_argument("build", help="the build to compare")
    p.set_defaults(fn=run)


def run(args) -> int:
    """Per stem: equal bytes, or the largest sample difference (dB re. full scale) and the loudness
    difference; exit 1 when any stem differs."""
    from casu_dataset.formats.lock import compare_folders

    for d in (args.reference, args.build):
        if not (Path(d) / "scenes").is_dir():
            error(f"{d}: not a built CASU folder (no scenes/ config)")
            return 2
    rows = compare_folders(Path(args.reference), Path(args.build))
    diff = [r for r in rows if not r["equal"]]
    scenes = {r["scene_id"] for r in rows}
    print(
        f"{len(scenes)} scenes, {len(rows)} stems: {len(rows) - len(diff)} byte-identical, {len(diff)} differ"
    )
    for r in diff[:50]:
        print(
            f"  {r['scene_id']} {r['stem']}: "
            + (
                f"length {r['length_diff']:+d} samples"
                if "length_diff" in r
                else f"max sample difference {r['max_diff_db']} dBFS, loudness {r['lufs_diff']:+.4f} LU"
            )
        )
    return 1 if diff else 0
