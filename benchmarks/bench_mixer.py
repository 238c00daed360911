"""Scene composition throughput: CASU's mixer vs scaper 1.6.5 on the same layout and files.

Each scene: 30 s, 2 speakers, 6 turns, 3 events, one bed; written to a WAV plus its
annotation (CASU: annotation.json; scaper: JAMS). Both read the same 16 kHz WAV sources.
CASU runs in this process (and in a fork pool of 2, pool start included); scaper in
.venv-scaper (it needs numpy<2), timed around its generate calls only, so its interpreter
start is not charged to it.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import soundfile as sf

from casu_dataset.core.audio_io import load_audio
from casu_dataset.mix.mixer import (
    ClipCache,
    MixConfig,
    SceneSources,
    SourceRef,
    compose,
)
from casu_dataset.script.schema import parse_script
from casu_dataset.sounds.bank import bank_dir
from casu_dataset.speech.voices import VoiceRegistry, speak

ROOT = Path(__file__).resolve().parents[1]
SCAPER_PY = ROOT / ".venv-scaper" / "bin" / "python"
TURNS = [
    ("A", "Good morning, I booked a table for two at eight."),
    ("B", "Welcome. Your table is ready by the window."),
    ("A", "Wonderful. Could we see the wine list, please?"),
    ("B", "Of course. Tonight we have a special on fish."),
    ("A", "That sounds lovely. We will have the fish."),
    ("B", "Excellent choice. I will be right back."),
]
EVENTS = [
    "ev__bottle_glass_clink__glass.ogg",
    "ev__cash_register__20_Cash_till.ogg",
    "ev__phone_ring__phone-incoming-call.ogg",
]
BED = "ba__river_stream_waterfall__river.ogg"  # 36 s: cut, not looped, in both tools


def prepare(work: Path) -> dict:
    """16 kHz WAV sources in scaper's folder layout (label folders), shared by both tools."""
    fg, bg = work / "fg", work / "bg"
    reg = VoiceRegistry()
    files = {"turns": [], "events": []}
    for i, (spk, text) in enumerate(TURNS):
        audio, sr = speak(text, reg["flite-slt" if spk == "A" else "flite-rms"])
        p = fg / f"speech{i}" / f"turn{i}.wav"
        p.parent.mkdir(parents=True)
        sf.write(p, load_audio_array(audio, sr), 16000, subtype="FLOAT")
        files["turns"].append(p)
    for j, name in enumerate(EVENTS):
        p = fg / f"event{j}" / f"event{j}.wav"
        p.parent.mkdir(parents=True)
        sf.write(p, load_audio(bank_dir() / "audio" / name), 16000, subtype="FLOAT")
        files["events"].append(p)
    p = bg / "bed" / "bed.wav"
    p.parent.mkdir(parents=True)
    sf.write(p, load_audio(bank_dir() / "audio" / BED), 16000, subtype="FLOAT")
    files["bed"] = p
    files["fg"], files["bg"] = fg, bg
    return files


def load_audio_array(audio, sr):
    from casu_dataset.core.audio_io import load_array

    return load_array(audio, sr, "tts")


def script(i: int):
    return parse_script(
        {
            "id": f"bench{i}",
            "place": "restaurant",
            "speech_type": "conversation",
            "background": {"description": "a river", "keywords": ["river"]},
            "speakers": [
                {"id": "A", "role": "guest", "gender": "female"},
                {"id": "B", "role": "waiter", "gender": "male"},
            ],
            "turns": [{"speaker": s, "text": t} for s, t in TURNS],
            "events": [
                {
                    "id": f"e{j}",
                    "description": "x",
                    "keywords": ["x"],
                    "anchor": {"type": "during_turn", "turn": 2 * j + 1, "offset": 0.5},
                }
                for j in range(3)
            ],
        }
    )


def sources(files) -> SceneSources:
    return SceneSources(
        SourceRef(str(files["bed"]), "bed"),
        [SourceRef(str(p), p.stem) for p in files["turns"]],
        [SourceRef(str(p), p.stem) for p in files["events"]],
    )


CFG = MixConfig(fixed_duration=30.0)


def casu_scenes(files, seeds, out: Path, cache: ClipCache | None = None) -> list[dict]:
    cache = cache or ClipCache()
    src = sources(files)
    anns = []
    for s in seeds:
        r = compose(script(s), src, seed=s, cfg=CFG, cache=cache)
        r.write(out / f"scene{s}", stems=False)
        anns.append(r.annotation)
    return anns


_WARM: ClipCache | None = None  # set before fork: workers inherit the loaded sources


def _worker(args):
    files, seeds, out = args
    casu_scenes(files, seeds, Path(out), _WARM)
    return len(seeds)


def scaper_spec(files, anns: list[dict], out: Path) -> dict:
    scenes = []
    for a in anns:
        ev = []
        snr_sp = a["plan"]["speech_snr_db"]
        snr_ev = a["plan"]["event_snr_db"]
        for t in a["turns"]:
            ev.append(
                {
                    "label": f"speech{t['index']}",
                    "file": str(files["turns"][t["index"]]),
                    "onset": t["onset"],
                    "duration": t["offset"] - t["onset"],
                    "snr": snr_sp,
                }
            )
        for e in a["events"]:
            ev.append(
                {
                    "label": f"event{e['index']}",
                    "file": str(files["events"][e["index"]]),
                    "onset": e["onset"],
                    "duration": e["offset"] - e["onset"],
                    "snr": snr_ev,
                }
            )
        scenes.append(
            {
                "seed": a["seed"],
                "duration": a["duration"],
                "background": {"label": "bed", "file": str(files["bed"])},
                "events": ev,
            }
        )
    return {"fg": str(files["fg"]), "bg": str(files["bg"]), "out": str(out), "scenes": scenes}


def _scaper(files, anns, out: Path) -> dict:
    """scaper on the same layouts, in .venv-scaper: {"seconds", "n"} or {"error"}."""
    out.mkdir()
    spec = scaper_spec(files, anns, out)
    p = subprocess.run(
        [str(SCAPER_PY), str(Path(__file__).with_name("scaper_worker.py"))],
        input=json.dumps(spec),
        capture_output=True,
        text=True,
        timeout=900,
    )
    if p.returncode != 0:
        return {"error": p.stderr.strip()[-500:]}
    return json.loads(p.stdout.strip().splitlines()[-1])


def run(quick: bool = False) -> dict:
    """Rounds of (CASU in 1 process, CASU in 2 processes, scaper), interleaved so that a slow
    spell of a shared machine hits every tool alike; each tool's best round is its figure."""
    n, rounds = (6, 1) if quick else (60, 5)
    procs = 2
    work = Path(tempfile.mkdtemp(prefix="casu-bench-mix-"))
    try:
        files = prepare(work)
        seeds = list(range(n))
        cache = ClipCache()
        t = time.perf_counter()
        casu_scenes(files, [1000], work / "casu_cold", cache)  # first scene: loads every source
        cold = time.perf_counter() - t
        global _WARM
        _WARM = cache
        chunks = [seeds[i::procs] for i in range(procs)]
        times: dict[str, list[float]] = {"casu": [], "casu_mp": [], "scaper": []}
        scaper_error = (
            None
            if SCAPER_PY.exists()
            else (f"{SCAPER_PY} missing (make bench installs it with scripts/setup_scaper.sh)")
        )
        anns: list[dict] = []
        for r in range(rounds):
            t = time.perf_counter()
            anns = casu_scenes(files, seeds, work / f"casu{r}", cache)
            times["casu"].append(time.perf_counter() - t)
            t = time.perf_counter()
            with mp.get_context("fork").Pool(procs) as pool:
                pool.map(_worker, [(files, c, str(work / f"casu_mp{r}")) for c in chunks])
            times["casu_mp"].append(time.perf_counter() - t)
            if scaper_error is None:
                sc = _scaper(files, anns, work / f"scaper{r}")
                if "error" in sc:
                    scaper_error = sc["error"]
                else:
                    times["scaper"].append(sc["seconds"])
        casu_s, casu_mp_s = min(times["casu"]), min(times["casu_mp"])
        res = {
            "scenes": n,
            "rounds": rounds,
            f"ratio_casu_{procs}proc_vs_1proc": casu_s / casu_mp_s,
            "casu_cold_first_scene_s": cold,
            "casu_scenes_per_s": n / casu_s,
            f"casu_{procs}proc_scenes_per_s": n / casu_mp_s,
            "casu_ms_per_scene": 1000 * casu_s / n,
            "casu_ms_per_scene_each_round": [1000 * x / n for x in times["casu"]],
        }
        if scaper_error is not None:
            res["scaper_error"] = scaper_error
        else:
            scaper_s = min(times["scaper"])
            res["scaper_ms_per_scene"] = 1000 * scaper_s / n
            res["scaper_ms_per_scene_each_round"] = [1000 * x / n for x in times["scaper"]]
            res["scaper_scenes_per_s"] = n / scaper_s
            res["ratio_casu_vs_scaper"] = scaper_s / casu_s
            res[f"ratio_casu_{procs}proc_vs_scaper"] = scaper_s / casu_mp_s
            # Same layout check: scaper's mixture length equals ours.
            x, sr = sf.read(work / "scaper0" / "scene0.wav")
            res["scaper_scene_len_s"] = len(x) / sr
        return res
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    import sys

    print(json.dumps(run(quick="--quick" in sys.argv), indent=1))
