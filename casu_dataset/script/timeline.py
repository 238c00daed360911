"""Timing resolution: from a script's anchors and the real clip durations to onsets.

Pure arithmetic over durations and drawn gaps; no audio. Every drawn value is returned so
the annotation can regenerate the scene without the random generator.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from casu_dataset.core.errors import InputError
from casu_dataset.script.schema import (
    AfterTurn,
    AtStart,
    AtTime,
    DuringTurn,
    SceneScript,
)

MIN_EVENT_S = 0.5


class TimelineError(InputError, ValueError):
    """A scene whose layers do not fit its duration limit; names the scene and the cause."""


@dataclass
class TimingConfig:
    gap_s: tuple[float, float] = (0.25, 0.8)  # silence between turns
    overlap_prob: float = 0.0  # chance a conversation turn overlaps the last
    overlap_s: tuple[float, float] = (0.1, 0.35)  # how far it overlaps
    lead_in_s: tuple[float, float] = (0.4, 1.2)  # before the first turn
    tail_s: tuple[float, float] = (0.5, 1.2)  # after the last sound
    event_gap_s: tuple[float, float] = (0.2, 0.5)  # after a speech-holding event


@dataclass
class Span:
    onset: float
    offset: float


@dataclass
class Timeline:
    turns: list[Span]
    events: list[Span]
    duration: float
    drawn: dict = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def _u(rng: np.random.Generator, lo_hi: tuple[float, float]) -> float:
    lo, hi = lo_hi
    return float(lo if hi <= lo else rng.uniform(lo, hi))


def resolve(
    script: SceneScript,
    turn_durs: list[float],
    event_durs: list[float],
    rng: np.random.Generator,
    cfg: TimingConfig,
    fixed_duration: float | None = None,
) -> Timeline:
    """Lay out turns and events; raise TimelineError if they overrun the scene limit."""
    limit = script.max_duration
    if fixed_duration is not None and fixed_duration > limit:
        raise TimelineError(
            f"scene {script.id}: fixed duration {fixed_duration} s exceeds the {limit} s limit"
        )
    notes: list[str] = []
    drawn: dict = {
        "lead_in_s": _u(rng, cfg.lead_in_s),
        "gaps_s": [],
        "overlaps_s": [],
        "event_gaps_s": [],
        "tail_s": _u(rng, cfg.tail_s),
    }
    ev = script.events
    ev_spans: list[Span | None] = [None] * len(ev)

    # Events at the start open the scene; speech waits for them to finish.
    t = drawn["lead_in_s"]
    for j, e in enumerate(ev):
        if isinstance(e.anchor, AtStart):
            span = Span(e.anchor.offset, e.anchor.offset + event_durs[j])
            ev_spans[j] = span
            t = max(t, span.offset + _draw_event_gap(rng, cfg, drawn))
        elif isinstance(e.anchor, AtTime):
            ev_spans[j] = Span(e.anchor.time, e.anchor.time + event_durs[j])

    turns: list[Span] = []
    for i, d in enumerate(turn_durs):
        if i > 0:
            changes = script.turns[i].speaker != script.turns[i - 1].speaker
            if changes and cfg.overlap_prob > 0 and rng.random() < cfg.overlap_prob:
                ov = min(_u(rng, cfg.overlap_s), 0.5 * turn_durs[i - 1])
                drawn["overlaps_s"].append(ov)
                t = turns[-1].offset - ov
            else:
                drawn["overlaps_s"].append(0.0)
            held = [
                s
                for s, e in zip(ev_spans, ev)
                if s is not None
                and isinstance(e.anchor, AfterTurn)
                and e.anchor.turn == i - 1
                and e.anchor.hold_speech
            ]
            if held:
                t = max(t, max(s.offset for s in held) + _draw_event_gap(rng, cfg, drawn))
        turns.append(Span(t, t + d))
        # Events anchored to this turn are placed once its span is known.
        for j, e in enumerate(ev):
            a = e.anchor
            if isinstance(a, DuringTurn) and a.turn == i:
                off = a.offset
                if off >= d:  # it would start after the turn ends: not "during" it; moving it would hide that
                    raise TimelineError(
                        f"scene {script.id}: events[{j}] ({e.id}): during_turn offset {a.offset:g} s "
                        f"is past the end of turn {i}, which lasts {d:.2f} s; use an offset below "
                        f"{d:.2f} s or anchor it after_turn {i}"
                    )
                if off > 0.9 * d:  # the last tenth of the turn: kept inside it, and noted
                    off = 0.9 * d
                    notes.append(
                        f"events[{j}]: offset {a.offset} s past turn {i}'s {d:.2f} s; moved to {off:.2f} s"
                    )
                ev_spans[j] = Span(t + off, t + off + event_durs[j])
            elif isinstance(a, AfterTurn) and a.turn == i:
                ev_spans[j] = Span(t + d + a.offset, t + d + a.offset + event_durs[j])
        gap = _u(rng, cfg.gap_s)
        drawn["gaps_s"].append(gap)
        t = t + d + gap

    spans = [s for s in ev_spans if s is not None]
    end = max([turns[-1].offset] + [s.offset for s in spans])
    # Every turn must fit whole; an event must start and be heard for MIN_EVENT_S, and may
    # be cut by the scene end after that.
    needed = max([turns[-1].offset] + [s.onset + min(MIN_EVENT_S, s.offset - s.onset) for s in spans])
    duration = fixed_duration if fixed_duration is not None else min(limit, end + drawn["tail_s"])
    if needed > duration:
        speech = sum(turn_durs)
        raise TimelineError(
            f"scene {script.id}: the timeline needs {needed:.2f} s but the scene is limited to "
            f"{duration:g} s ({speech:.1f} s of speech in {len(turn_durs)} turns, {len(ev)} events)"
        )
    events: list[Span] = []
    for j, s in enumerate(ev_spans):
        if s is None:  # an anchor to no turn of the script: it was never placed
            raise TimelineError(f"scene {script.id}: events[{j}] ({ev[j].id}): its anchor names no turn")
        if s.offset > duration:
            notes.append(f"events[{j}]: cut at the scene end ({s.offset:.2f} s > {duration:.2f} s)")
            s.offset = duration
        events.append(s)
    return Timeline(turns=turns, events=events, duration=float(duration), drawn=drawn, notes=notes)


def _draw_event_gap(rng, cfg, drawn) -> float:
    g = _u(rng, cfg.event_gap_s)
    drawn["event_gaps_s"].append(g)
    return g
