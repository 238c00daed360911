"""`voices`: per-voice WER table over the fixed sentence set."""

from __future__ import annotations

import json

from casu_dataset.cli.common import check_out_file, error, int_in, write_report


def add(sub) -> None:
    p = sub.add_parser("voices", help="per-voice WER table over the fixed sentence set")
    p.add_argument("--sentences", type=int_in(0), default=0, help="use only the first N sentences (0: all)")
    p.add_argument("--json", default=None, help="also write the table as JSON here")
    p.add_argument("--cache", default=None)
    p.set_defaults(fn=run)


def run(args) -> int:
    from casu_dataset.speech.intelligibility import (
        DEFAULT_MAX_WER,
        SENTENCES,
        WhisperChecker,
        voice_wer_table,
    )
    from casu_dataset.speech.layer import SpeechSynth
    from casu_dataset.speech.voices import VoiceRegistry

    why = check_out_file(args.json, "--json")
    if why:
        error(why)
        return 2
    reg = VoiceRegistry().available()
    sentences = SENTENCES[: args.sentences] if args.sentences else SENTENCES
    rows = voice_wer_table(reg, SpeechSynth(args.cache), WhisperChecker(), sentences)
    print("| voice | engine | gender | age | pitch (st) | tempo | WER | kept |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['voice']} | {r['engine']} | {r['gender']} | {r['age']} | {r['pitch_st']:+.2f} | "
            f"{r['tempo']:.3f} | {r['wer']:.3f} | {'yes' if r['wer'] <= DEFAULT_MAX_WER else 'no'} |"
        )
    if args.json and not write_report(args.json, json.dumps(rows, indent=1), "--json"):
        return 2
    return 0
