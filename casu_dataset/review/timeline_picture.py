"""A scene's timeline as a PNG: the mixture's spectrogram with every speech turn and sound
event drawn as a labelled span (for the review page, the dataset card and the README)."""

from __future__ import annotations

import io
import textwrap

import numpy as np


def timeline_png(mixture: np.ndarray, annotation: dict, width: float = 10.0, dpi: int = 100) -> bytes:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from scipy.signal import spectrogram

    sr = annotation["sample_rate"]
    dur = len(mixture) / sr
    f, t, S = spectrogram(mixture.astype(np.float64), fs=sr, nperseg=512, noverlap=384)
    db = 10 * np.log10(S + 1e-12)
    turns, events = annotation.get("turns", []), annotation.get("events", [])
    fig, (ax_s, ax) = plt.subplots(
        2, 1, figsize=(width, 4.2), sharex=True, gridspec_kw={"height_ratios": [1.1, 2]}
    )
    speakers = sorted({tr["speaker"] for tr in turns})
    colours = plt.get_cmap("tab10")
    rows = {sp: i for i, sp in enumerate(speakers)}
    cps = 0.85 * width * 72 / (7 * 0.6) / max(dur, 1e-3)  # characters of 7-pt text per second of span
    ev_row = len(speakers)
    for tr in turns:
        y = rows[tr["speaker"]]
        ax_s.barh(y, tr["offset"] - tr["onset"], left=tr["onset"], height=0.8, color=colours(y), alpha=0.85)
        ax_s.text(
            tr["onset"] + 0.05,
            y,
            textwrap.shorten(tr["text"], width=max(8, int(cps * (tr["offset"] - tr["onset"])))),
            va="center",
            fontsize=7,
            color="white",
            clip_on=True,
        )
    for e in events:
        ax_s.barh(ev_row, e["offset"] - e["onset"], left=e["onset"], height=0.8, color="#d62728", alpha=0.85)
        ax_s.text(e["onset"] + 0.05, ev_row, e["id"], va="center", fontsize=7, color="white", clip_on=True)
        for a in (ax_s, ax):
            a.axvline(e["onset"], color="#d62728", lw=0.8, ls="--")
    ax_s.set_yticks(range(len(speakers) + 1), [*speakers, "events"], fontsize=8)
    ax_s.set_ylim(-0.6, ev_row + 0.6)
    ax_s.invert_yaxis()
    bg = annotation.get("script", {}).get("background", {})
    ax_s.set_title(
        f"{annotation['scene_id']}  ·  background: {bg.get('description', '')}"[:140], fontsize=9, loc="left"
    )
    ax.pcolormesh(t, f / 1000, db, shading="auto", cmap="magma", vmin=db.max() - 80, vmax=db.max())
    ax.set_ylabel("kHz")
    ax.set_xlabel("seconds")
    ax.set_xlim(0, dur)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    plt.close(fig)
    return buf.getvalue()
