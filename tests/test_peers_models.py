"""The peers' REAL Qwen2-Audio classes on CASU's exported tasks (scripts/peers_real_models.py): lmms-eval
0.7.3's `qwen2_audio` and lm-eval 0.4.13's `hf-audiolm-qwen` load a tiny random-weight Qwen2-Audio
saved to a folder and run contextual_reasoning and scene_description (2 rows each) through their own
simple_evaluate on CPU. Every request's audio must be the row's FLAC (same samples, same frame
count), reach generate as input features with the matching mask and <|AUDIO|> tokens, and every
junk reply must be scored by CASU's parser. What stops each class as shipped is checked too, and
the checks are shown to catch planted faults. Skipped without .venv-peers (CI: `make peers-quick`)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import textwrap

import pytest
from conftest import ROOT

PEERS_PY = ROOT / ".venv-peers" / "bin" / "python"
TASKS = ["contextual_reasoning", "scene_description"]
LIMIT = 2


def _peers_state() -> str | None:
    if not PEERS_PY.exists() or not list((ROOT / ".venv-peers").glob(".casu-peers-*")):
        return (
            "no .venv-peers with lmms-eval and lm-eval: run `bash scripts/setup_peers.sh` "
            "(or `make peers-quick`)"
        )
    p = subprocess.run([str(PEERS_PY), "-c", "import librosa"], capture_output=True, timeout=120)
    if p.returncode != 0:
        return (
            "lmms-eval's qwen2_audio imports librosa (lmms-eval's [audio] extra), which .venv-peers lacks: "
            "`make peers-quick` installs it"
        )
    return None


_STATE = _peers_state()
needs_peers = pytest.mark.skipif(_STATE is not None, reason=_STATE or "")

DRIVER = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path
    sys.path.insert(0, "scripts")
    import peers_real_models as prm

    dataset, out = Path(sys.argv[1]), Path(sys.argv[2])
    tasks, limit = sys.argv[3].split(","), int(sys.argv[4])
    r = prm.run_all(dataset, out, limit, ["lmms-eval", "lm-eval"], tasks)
    planted = {}
    for peer, (res, rec) in r.runs.items():
        calls = rec.calls
        calls[0]["audio"][0]["n"] -= 1                      # a request one sample short
        calls[1]["generate"][0]["mask_frames"] = [0]         # features that cover nothing
        calls[2]["generate"] = []                            # generate never called
        calls[3]["generate"][0]["error"] = "RuntimeError: x" # generate raised (lmms-eval: empty reply)
        mcq = next(s for s in res["samples"][tasks[0]])
        item = mcq["acc"] if isinstance(mcq.get("acc"), dict) else mcq["family_acc"]
        item["parsed"], item["method"] = "B", "bare_letter"  # a reply read as a letter it is not
        fails, _ = prm.check(peer, res, rec, r.want, limit, tasks)
        rec.calls = []                                       # no audio reached the model at all
        fails2, _ = prm.check(peer, res, rec, r.want, limit, tasks)
        planted[peer] = fails + fails2
    print("RESULT " + json.dumps({"rc": r.rc, "planted": planted}))
    """
)


@needs_peers
def test_real_qwen2_audio_classes_take_casu_audio(casu_small, tmp_path):
    out = tmp_path / "real"
    p = subprocess.run(
        [str(PEERS_PY), "-c", DRIVER, str(casu_small), str(out), ",".join(TASKS), str(LIMIT)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"},
    )
    assert p.returncode == 0, (p.stdout[-2000:], p.stderr[-4000:])
    res = json.loads(next(x for x in p.stdout.splitlines() if x.startswith("RESULT "))[len("RESULT ") :])
    report = json.loads((out / "report.json").read_text())
    assert res["rc"] == 0 and report["failures"] == [], report["failures"]
    assert report["versions"]["lmms-eval"] == "0.7.3" and report["versions"]["lm-eval"] == "0.4.13"

    for peer, keyword in (("lmms-eval", "audio"), ("lm-eval", "audios")):
        e = report["peers"][peer]
        assert e["requests"] == LIMIT * len(TASKS), (peer, e["requests"])
        assert e["processor_keyword"] == [keyword], (peer, e["processor_keyword"])
        for task in TASKS:
            rows = e["tasks"][task]["rows"]
            assert len(rows) == LIMIT, (peer, task)
            for r in rows:
                assert r["frames"] > 16000 and r["audio_len_seen"] == r["frames"], (peer, task, r)
                assert r["input_features"] == [1, 128, 3000], (peer, task, r)
                assert r["mask_frames"] == [math.ceil(r["frames"] / 160)], (peer, task, r)
                assert r["audio_tokens"][0] > 100, (peer, task, r)
        # random weights: replies are junk, scored by CASU's parser as unparsed (the script checked
        # each parsed letter equals parse_choice(reply)); the rate is what the samples say
        mcq = e["tasks"]["contextual_reasoning"]
        unparsed = sum(r["parsed"] is None for r in mcq["rows"])
        assert mcq["metrics"]["unparsed_rate,none"] == pytest.approx(unparsed / LIMIT)
        assert all(r["method"] == "unparsed" for r in mcq["rows"] if r["parsed"] is None)

    # why neither class runs on CPU as shipped, each shim added in turn
    lmms = report["peers"]["lmms-eval"]["probes"]
    assert [pr["shims"] for pr in lmms] == [[]]
    assert "Torch not compiled with CUDA enabled" in lmms[0]["error"]
    assert 'inputs.to("cuda")' in lmms[0]["peer_at"], lmms[0]
    lm = report["peers"]["lm-eval"]["probes"]
    assert [pr["shims"] for pr in lm] == [[], ["registry"], ["registry", "audios"]]
    assert "'hf-audiolm-qwen' already registered" in lm[0]["error"] and "HFAudioLM" in lm[0]["error"]
    assert "no audio inputs were passed" in lm[1]["error"] and "hf_audiolm.py" in lm[1]["peer_at"], lm[1]
    assert "Torch not compiled with CUDA enabled" in lm[2]["error"], lm[2]
    assert "hf_audiolm.py" in lm[2]["peer_at"] and '.to("cuda")' in lm[2]["peer_at"], lm[2]
    assert report["peers"]["lm-eval"]["cuda_redirects"] > 0

    for peer, fails in res["planted"].items():
        text = "\n".join(fails)
        for expected in (
            "!= the row's FLAC",
            "feature mask covers [0]",
            "generate called 0 times",
            "generate raised RuntimeError",
            "CASU's parser reads",
            "no request with its audio reached the model",
            "no request reached the processor",
        ):
            assert expected in text, (peer, expected, text)
