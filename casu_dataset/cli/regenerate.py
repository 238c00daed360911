"""`regenerate ANNOTATION [--out DIR] [--check WAV]`: rebuild a scene from its annotation.json."""

from __future__ import annotations


def add(sub) -> None:
    p = sub.add_parser("regenerate", help="rebuild a scene from its annotation.json")
    p.add_argument("annotation")
    p.add_argument("--out", help="write the regenerated scene here")
    p.add_argument("--check", help="compare with this mixture.wav; exit 1 unless bit-identical")
    p.add_argument("--search", nargs="*", default=[], help="extra folders to look for moved sources")
    p.set_defaults(fn=run)


def run(args) -> int:
    import numpy as np

    from casu_dataset.core.audio_io import load_audio
    from casu_dataset.mix.regenerate import regenerate
    from casu_dataset.sounds.bank import bank_dir

    res = regenerate(args.annotation, search_dirs=[bank_dir() / "audio", *args.search])
    if args.out:
        d = res.write(args.out)
        print(f"regenerated {res.annotation['scene_id']} -> {d}")
    if args.check:
        ref = load_audio(args.check)
        same = ref.shape == res.mixture.shape and np.array_equal(ref, res.mixture)
        print(f"{args.check}: {'bit-identical' if same else 'DIFFERENT'}")
        return 0 if same else 1
    return 0
