"""`timeline --dataset DIR --scene ID --out PNG`: a scene's spectrogram with labelled spans."""

from __future__ import annotations

from pathlib import Path

from casu_dataset.cli.common import error


def add(sub) -> None:
    p = sub.add_parser(
        "timeline", help="write a scene's timeline picture (spectrogram + labelled spans) as PNG"
    )
    p.add_argument("--dataset", required=True)
    p.add_argument("--scene", required=True)
    p.add_argument("--out", required=True)
    p.set_defaults(fn=run)


def run(args) -> int:
    from casu_dataset.contract import SceneAnnotation
    from casu_dataset.core.audio_io import decode_bytes
    from casu_dataset.formats.reader import BuiltDataset, LoadError
    from casu_dataset.review.timeline_picture import timeline_png

    try:
        rows = (
            BuiltDataset(args.dataset)
            .table("scenes", columns=["scene_id", "audio", "annotation"])
            .arrow.to_pylist()
        )
    except LoadError as err:
        error(f"--dataset {err}")
        return 2
    row = next((r for r in rows if r["scene_id"] == args.scene), None)
    if row is None:
        error(f"--scene {args.scene!r} is not in {args.dataset}")
        return 2
    audio = decode_bytes((row["audio"] or {}).get("bytes") or b"", f"--scene {args.scene}: audio")
    ann = SceneAnnotation.parse(row["annotation"] or "", f"--scene {args.scene}: its annotation")
    png = timeline_png(audio, ann.raw)
    try:
        Path(args.out).write_bytes(png)
    except OSError as err:
        error(f"--out {args.out}: cannot write it ({err.strerror or err})")
        return 2
    print(f"wrote {args.out}")
    return 0
