"""Checks a build runs once its catalog is loaded, before any scene is rendered.

Retrieval never falls back silently: a fill whose bank `type` the catalog does not have, or
(on contrast families) whose best match is a clip of another type because the intended clips
were rejected as unusable, is a build error naming the fill: without these checks a fill with
a `type` the bank lacks would build, and an event whose intended clips were all rejected would
get an unrelated clip. Clips without a type (Clotho beds) are never counted against a
fill: their catalogs carry no bank types to compare with."""

from __future__ import annotations

from casu_dataset.families.compile import FamilyScene


def _items(scene):
    s = scene.script
    yield "background", s.background.description, s.background.keywords, "background"
    for e in s.events:
        yield e.id, e.description, e.keywords, "event"


def _where(scene, layer: str) -> str:
    if not isinstance(scene, FamilyScene):
        return f"scene {scene.script.id}, {layer}"
    what = f"fill {scene.fill!r} ({layer})" if scene.fill and layer == scene.slot else layer
    return f"{'family ' + scene.family_id + ': ' if scene.family_id else ''}scene {scene.script.id}, {what}"


def fill_problems(scenes: list, retriever, check_retrieval: bool) -> list[str]:
    """One line per fill that cannot be built as written (empty when all can)."""
    cat = retriever.catalog
    types = {k: {c.type for c in cat.clips if c.kind == k and c.type} for k in ("background", "event")}
    rejected: dict[str, list[str]] = {}
    for r in cat.rejected:
        rejected.setdefault(r.get("type") or "?", []).append(f"{r['clip_id']} ({r['reason']})")
    out, seen = [], {}
    if check_retrieval:  # one batched forward pass for every query instead of one per fill
        queries = {(desc, tuple(kws)) for sc in scenes for _, desc, kws, _ in _items(sc)}
        retriever.encode_queries([d for d, _ in queries], [list(k) for _, k in queries])
    for sc in scenes:
        for layer, desc, kws, kind in _items(sc):
            want = (sc.types or {}).get(layer)
            if not want or not types[kind]:
                continue
            if want not in types[kind]:
                article = "an" if kind == "event" else "a"
                out.append(
                    f"{_where(sc, layer)}: type {want!r} is not {article} {kind} type of catalog {cat.name}"
                    + _rejected_note(rejected, want)
                )
                continue
            if not check_retrieval:
                continue
            key = (desc, tuple(kws), kind)
            if key not in seen:  # variants share their fills: one query each
                seen[key] = retriever.search(desc, kws, k=1, kind=kind)[0]
            top = seen[key]
            if top.clip.type and top.clip.type != want:
                out.append(
                    f"{_where(sc, layer)}: retrieves {top.clip.id} of type {top.clip.type!r} "
                    f"(score {top.score:.2f}), not the intended {want!r}" + _rejected_note(rejected, want)
                )
    return out


def _rejected_note(rejected: dict, want: str) -> str:
    r = rejected.get(want) or []
    return f" ({len(r)} clip(s) of that type rejected: {'; '.join(r[:3])})" if r else ""


def rejected_summary(catalog) -> dict:
    """What a build records about what its catalog refused when it loaded: clips whose audio
    failed the checks and manifest/CSV rows that could not be read, each with why."""
    clips = [{"clip_id": r["clip_id"], "reason": r["reason"]} for r in catalog.rejected]
    rows = [
        {"row": r["row"], "reason": r["reason"]}
        for r in catalog.report.skipped
        if not any(r["row"].endswith(f"clip {c['clip_id']}") for c in clips)
    ]
    return {"rejected": len(clips) + len(rows), "clips": clips, "rows": rows}


def merge_rejected(parts: list) -> dict:
    """The shards' summaries joined (each clip or row once, in a stable order)."""
    clips = {c["clip_id"]: c for p in parts if p for c in p.get("clips", [])}
    rows = {r["row"]: r for p in parts if p for r in p.get("rows", [])}
    return {
        "rejected": len(clips) + len(rows),
        "clips": [clips[k] for k in sorted(clips)],
        "rows": [rows[k] for k in sorted(rows)],
    }


def rejected_text(summary: dict | None) -> str:
    """The card's lines about rejected catalog clips and rows."""
    if not summary or not summary.get("rejected"):
        return "Catalog clips rejected: 0."
    lines = [f"Catalog clips rejected: {summary['rejected']} (never used; `build_report.json` lists each)"]
    lines += [f"- {c['clip_id']}: {c['reason']}" for c in summary.get("clips", [])[:50]]
    lines += [f"- {r['row']}: {r['reason']}" for r in summary.get("rows", [])[:50]]
    return "\n".join(lines)
