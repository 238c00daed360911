"""`merge --out DIR SHARD...`: join shard folders into one dataset."""

from __future__ import annotations

import json
from pathlib import Path

from casu_dataset.cli.common import check_out, error, long_flag
from casu_dataset.core.errors import CasuError


def add(sub) -> None:
    p = sub.add_parser("merge", help="join shard folders into one dataset")
    p.add_argument("--out", required=True)
    p.add_argument("shards", nargs="+")
    p.set_defaults(fn=run, flag=long_flag)  # the folder writer's `out` is --out


def _report_problem(f: Path) -> str | None:
    """Why a shard's build_report.json is not a CASU build report (None when it is one)."""
    try:
        rep = json.loads(f.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        return f"{f}: not a readable build report ({err})"
    missing = [k for k in ("settings", "built", "skipped") if not isinstance(rep, dict) or k not in rep]
    if missing:
        return f"{f}: not a CASU build report (no {', '.join(missing)})"
    if not isinstance(rep["settings"], dict):
        return f"{f}: settings: expected an object"
    if not isinstance(rep["built"], list) or not all(isinstance(s, str) for s in rep["built"]):
        return f"{f}: built: expected a list of scene ids"
    if not isinstance(rep["skipped"], list) or not all(
        isinstance(s, dict) and isinstance(s.get("scene_id"), str) for s in rep["skipped"]
    ):
        return f"{f}: skipped: expected a list of objects with a scene_id"
    if not isinstance(rep.get("lock"), (dict, type(None))):
        return f"{f}: lock: expected an object or null"
    return None


def run(args) -> int:
    from casu_dataset.dataset.writer import merge_folders

    why = check_out(args.out, replaces=True)
    if why:
        error(why)
        return 2
    for d in args.shards:  # each shard's report names its own problem (merge_folders reads them unchecked)
        f = Path(d) / "build_report.json"
        why = (
            _report_problem(f) if f.is_file() else None
        )  # no report: merge_folders says "not a CASU build folder"
        if why:
            error(f"merge failed: {why}")
            return 1
    try:
        rep = merge_folders(args.out, args.shards)
    except CasuError as err:  # whatever a shard lacks, the merge failed (1), naming the shard
        error(f"merge failed: {err}")
        return 1
    print(
        f"merged {len(args.shards)} shards: {len(rep.built)} scenes, {len(rep.skipped)} skipped -> {args.out}"
    )
    return 0
