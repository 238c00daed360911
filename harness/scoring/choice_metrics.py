"""The multiple-choice statistics over scored records (written lines): paired accuracy over
minimal pairs, accuracy and family accuracy with intervals that resample whole contrast families,
breakdowns, and recording consistency across two realizations of the dataset."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence

import numpy as np

from harness.scoring.bootstrap import BOOTSTRAP_ITERS, mean_with_ci

FAMILY_SIZE = 4


def paired_accuracy(records: Sequence[Mapping]) -> dict:
    """Minimal pairs: a pair counts as right only if every variant in it is answered right."""
    groups: dict[str, list[bool]] = defaultdict(list)
    for r in records:
        if r.get("minimal_pair_id"):
            groups[r["minimal_pair_id"]].append(bool(r["correct"]))
    pairs = [all(v) for v in groups.values() if len(v) >= 2]
    return mean_with_ci(pairs)


def family_bootstrap(
    records: list[dict], n_boot: int | None = None, seed: int = 0, level: float = 0.95
) -> dict:
    """Accuracy and family accuracy of contrast-family records, with intervals that resample
    whole families (a family's variants share speech, question and options, so they are
    correlated: resampling questions would make the intervals too narrow).

    A family counts as right for a task only if all its variants are answered right (chance
    1/256 for four variants of a four-option question)."""
    fams: dict[str, dict[str, list[bool]]] = defaultdict(lambda: defaultdict(list))
    for r in records:
        fams[r["family_id"]][r.get("task", "")].append(bool(r["correct"]))
    if not fams:
        return {"accuracy": mean_with_ci([]), "family_accuracy": mean_with_ci([])}
    ids = sorted(fams)
    # Per family: (right answers, answers, families-right, families) over its tasks.
    # A family-task missing variants (a --limit run) counts for accuracy, not for family accuracy.
    per = np.array(
        [
            [
                sum(sum(v) for v in fams[f].values()),
                sum(len(v) for v in fams[f].values()),
                sum(all(v) for v in fams[f].values() if len(v) >= FAMILY_SIZE),
                sum(len(v) >= FAMILY_SIZE for v in fams[f].values()),
            ]
            for f in ids
        ],
        dtype=np.float64,
    )
    acc = per[:, 0].sum() / per[:, 1].sum()
    if per[:, 3].sum() == 0:
        return {
            "accuracy": mean_with_ci([bool(r["correct"]) for r in records], seed=seed),
            "family_accuracy": {
                "value": None,
                "ci95": None,
                "n": 0,
                "families": 0,
                "note": "no family with all its variants evaluated",
            },
        }
    fam = per[:, 2].sum() / per[:, 3].sum()
    n_boot = BOOTSTRAP_ITERS.get() if n_boot is None else n_boot
    if n_boot == 0:  # bootstrap_iters=0: the values without intervals
        return {
            "accuracy": {
                "value": float(acc),
                "ci95": None,
                "n": int(per[:, 1].sum()),
                "families": len(ids),
                "resampled": "families",
            },
            "family_accuracy": {
                "value": float(fam),
                "ci95": None,
                "n": int(per[:, 3].sum()),
                "families": len(ids),
                "chance": 1 / 256,
                "resampled": "families",
            },
        }
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(ids), size=(n_boot, len(ids)))
    s = per[idx].sum(axis=1)
    q = [(1 - level) / 2 * 100, (1 + level) / 2 * 100]
    lo_a, hi_a = np.percentile(s[:, 0] / s[:, 1], q)
    with np.errstate(invalid="ignore"):
        lo_f, hi_f = np.nanpercentile(s[:, 2] / s[:, 3], q)
    return {
        "accuracy": {
            "value": float(acc),
            "ci95": [float(lo_a), float(hi_a)],
            "n": int(per[:, 1].sum()),
            "families": len(ids),
            "resampled": "families",
        },
        "family_accuracy": {
            "value": float(fam),
            "ci95": [float(lo_f), float(hi_f)],
            "n": int(per[:, 3].sum()),
            "families": len(ids),
            "chance": 1 / 256,
            "resampled": "families",
        },
    }


def breakdown(records: Sequence[Mapping], key: str) -> dict:
    groups: dict[str, list[float]] = defaultdict(list)
    for r in records:
        k = r.get(key)
        k = "+".join(sorted(k)) if isinstance(k, list) else str(k)
        groups[k].append(float(r["correct"]))
    return {k: {"value": float(np.mean(v)), "n": len(v)} for k, v in sorted(groups.items())}


def recording_consistency(r1: Sequence[Mapping], r2: Sequence[Mapping], seed: int = 0) -> dict | None:
    """Recording robustness: the share of contrast families a model answers the same on
    two realizations of the dataset (realization 2: every non-speech layer on another recording of
    the same bank type, `casu build --realization 2`): every question of every variant of the
    family (every rotation with --circular) got the same parsed answer on both. A model that heard
    the kind of sound, not one recording, scores high; read it beside accuracy (a model that
    ignores the audio answers alike everywhere, and is consistent at chance accuracy).

    Questions pair by their row `id` (and rotation). An unparsed answer (or a failed request) on
    either side counts as not the same, never guessed; their number is reported. A family not
    evaluated whole on both sides (absent from realization 2) is left out and counted in
    `families_unpaired`. Also the family accuracy of each realization over the paired families.
    None when no record belongs to a family."""

    def by_family(records):
        out: dict[str, dict[tuple, dict]] = defaultdict(dict)
        for r in records:
            if r.get("family_id"):
                out[r["family_id"]][(r["id"], r.get("rotation", 0))] = r
        return out

    fa, fb = by_family(r1), by_family(r2)
    if not fa:
        return None
    same, right_a, right_b = [], [], []
    unpaired = 0
    unparsed = {"realization1": 0, "realization2": 0}
    for fam in sorted(fa):
        qa, qb = fa[fam], fb.get(fam, {})
        if set(qa) != set(qb):
            unpaired += 1
            continue
        pa = [qa[k].get("parsed") if qa[k].get("method") != "error" else None for k in sorted(qa)]
        pb = [qb[k].get("parsed") if qb[k].get("method") != "error" else None for k in sorted(qa)]
        unparsed["realization1"] += sum(x is None for x in pa)
        unparsed["realization2"] += sum(x is None for x in pb)
        same.append(all(x is not None and x == y for x, y in zip(pa, pb)))

        def right(q):
            return all(
                r.get("method") != "error" and r.get("correct")
                for r in q.values()
                if r.get("rotation", 0) == 0
            )

        right_a.append(right(qa))
        right_b.append(right(qb))
    res = mean_with_ci(same, seed=seed)
    return dict(
        res,
        families=len(same),
        consistent=int(sum(same)),
        families_unpaired=unpaired,
        unparsed=unparsed,
        family_accuracy_realization1=float(np.mean(right_a)) if right_a else None,
        family_accuracy_realization2=float(np.mean(right_b)) if right_b else None,
        resampled="families",
    )
