"""The real comparison: CASU's harness, the real lmms-eval 0.7.3 and lm-eval 0.4.13 (.venv-peers) on
the same fixed answers over a small built dataset, sample by sample (scripts/peers_compare.py); and
the comparison catches a difference wherever one is planted. Skipped without .venv-peers (CI runs
`make peers-quick`, which sets it up)."""

from __future__ import annotations

import json
import subprocess
import textwrap

import pytest
from conftest import ROOT

PEERS_PY = ROOT / ".venv-peers" / "bin" / "python"

needs_peers = pytest.mark.skipif(
    not PEERS_PY.exists() or not list((ROOT / ".venv-peers").glob(".casu-peers-*")),
    reason="no .venv-peers with lmms-eval and lm-eval: run `bash scripts/setup_peers.sh` "
    "(or `make peers-quick`)",
)

DRIVER = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path
    sys.path.insert(0, "scripts")
    import peers_compare as pc

    dataset, out = Path(sys.argv[1]), Path(sys.argv[2])
    run = pc.run_all(dataset, out)
    rc = pc.finish(run, dataset, out)
    # plant one difference of each kind, then compare again
    first = run.lmms["samples"]["role_inference"][0]["acc"]
    first["parsed"] = "D" if first["parsed"] != "D" else "A"
    run.lm["results"]["contextual_reasoning"]["family_acc,none"] = 0.5 + (
        run.lm["results"]["contextual_reasoning"]["family_acc,none"] or 0)
    key = sorted(k for k in run.lm_trace if k[0] == "counterfactual_reasoning")[0]
    run.lm_trace[key]["prompt"] += " "
    key = sorted(k for k in run.lmms_trace if k[0] == "role_inference")[1]
    run.lmms_trace[key]["audio"][0]["n"] += 1
    run.casu_samples["entity_extraction"].pop()
    run.lmms["results"]["scene_description"]["bertscore,none"] += 1e-6
    diffs, _ = pc.compare(*run.compared())
    print("RESULT " + json.dumps({"rc": rc, "planted": diffs}))
    """
)


@needs_peers
def test_real_peers_agree_with_casu_sample_by_sample(casu_small, tmp_path):
    p = subprocess.run(
        [str(PEERS_PY), "-c", DRIVER, str(casu_small), str(tmp_path / "cmp")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert p.returncode == 0, p.stderr[-3000:]
    line = next(x for x in p.stdout.splitlines() if x.startswith("RESULT "))
    res = json.loads(line[len("RESULT ") :])
    report = json.loads((tmp_path / "cmp" / "report.json").read_text())
    assert res["rc"] == 0 and report["differences"] == [], report["differences"]
    assert report["versions"]["lmms-eval"] == "0.7.3" and report["versions"]["lm-eval"] == "0.4.13"
    for task, s in report["tasks"].items():
        assert s["rows"] > 0 and s["agree"] == s["rows"], task
    assert report["rows"] == sum(s["rows"] for s in report["tasks"].values())
    mcq = [s["aggregates"] for t, s in report["tasks"].items() if t != "scene_description"]
    assert any(a["unparsed_rate"]["CASU"] > 0 for a in mcq)  # the fixed answers include unparseable replies
    assert any(a["acc"]["CASU"] > 0 for a in mcq) and any(a["acc"]["CASU"] < 1 for a in mcq)
    planted = "\n".join(res["planted"])
    for expected in (
        "role_inference",  # the flipped parsed letter
        "lmms-eval parsed",
        "contextual_reasoning: family_acc differs",
        "lm-eval prompt",
        "lmms-eval audio",
        "entity_extraction: CASU scored",
        "scene_description: bertscore differs",
    ):
        assert expected in planted, (expected, planted)


@needs_peers
def test_peers_cli_refuses_a_missing_dataset(tmp_path):
    p = subprocess.run(
        [
            str(PEERS_PY),
            "scripts/peers_compare.py",
            "--dataset",
            str(tmp_path / "nope"),
            "--out",
            str(tmp_path / "o"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode == 1 and "--dataset" in p.stderr and "nope" in p.stderr
