"""Runs inside .venv-scaper (scaper 1.6.5 needs numpy<2): generate the given layouts to WAV + JAMS.

stdin: JSON {"fg": dir, "bg": dir, "out": dir, "scenes": [{seed, duration, background, events: [...]}]}
stdout: JSON {"seconds": total wall time of the generate calls, "n": scenes}
"""

import json
import sys
import time
import warnings

import scaper

spec = json.load(sys.stdin)
warnings.filterwarnings("ignore")
t_total = 0.0
for i, sc_spec in enumerate(spec["scenes"]):
    t = time.perf_counter()
    sc = scaper.Scaper(sc_spec["duration"], spec["fg"], spec["bg"], random_state=sc_spec["seed"])
    sc.sr = 16000
    sc.n_channels = 1
    sc.ref_db = -35
    b = sc_spec["background"]
    sc.add_background(label=("const", b["label"]), source_file=("const", b["file"]), source_time=("const", 0))
    for e in sc_spec["events"]:
        sc.add_event(
            label=("const", e["label"]),
            source_file=("const", e["file"]),
            source_time=("const", 0),
            event_time=("const", e["onset"]),
            event_duration=("const", e["duration"]),
            snr=("const", e["snr"]),
            pitch_shift=None,
            time_stretch=None,
        )
    sc.generate(
        f"{spec['out']}/scene{i}.wav",
        f"{spec['out']}/scene{i}.jams",
        allow_repeated_label=True,
        allow_repeated_source=True,
        reverb=None,
        disable_sox_warnings=True,
        no_audio=False,
    )
    t_total += time.perf_counter() - t
print(json.dumps({"seconds": t_total, "n": len(spec["scenes"])}))
