"""Model adapters: every transformers family on a tiny random-weight model (its real path,
processor -> generate -> decode), batch-size invariance, clear load errors, lazy imports,
the API adapter against a real `transformers serve` process, the cascade and baselines."""

import subprocess
import sys

import numpy as np
import pytest
import tiny_models as tiny
from conftest import transformers_serve
from helpers import harness_cli

from casu_dataset.core.llm.backends import BackendError
from model_adapters import AdapterError, GenerationSettings, Request, make_adapter
from model_adapters.base import STOPS_RUN, ModelArgsError

FAMILIES = {
    "qwen2-audio": tiny.build_qwen2_audio,
    "qwen2.5-omni": tiny.build_qwen2_5_omni,
    "qwen3-omni": tiny.build_qwen3_omni,
    "audio-flamingo-3": tiny.build_audio_flamingo3,
    "phi-4-multimodal": tiny.build_phi4_multimodal,
    "voxtral": tiny.build_voxtral,
}
SETTINGS = GenerationSettings(max_new_tokens=6)


@pytest.fixture(scope="module")
def tiny_dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("tiny")
    return {name: build(root / name) for name, build in FAMILIES.items()}


def _requests():
    rng = np.random.default_rng(0)
    auds = [(rng.standard_normal(16000 * n) * 0.1).astype(np.float32) for n in (2, 5, 9)]
    return [
        Request(prompt=p, audio=a, options=["A", "the bell", "a siren"], id=str(i))
        for i, (p, a) in enumerate(zip(["What happens?", "Who speaks here, and why?", "Where?"], auds))
    ]


@pytest.mark.parametrize("name", list(FAMILIES))
def test_tiny_model_runs_and_does_not_depend_on_batch_size(name, tiny_dirs):
    a = make_adapter(name, {"pretrained": str(tiny_dirs[name]), "device": "cpu", "dtype": "float32"})
    reqs = _requests()
    batched = a.generate(reqs, SETTINGS)
    single = [a.generate([r], SETTINGS)[0] for r in reqs]
    assert batched == single and all(isinstance(t, str) for t in batched)
    assert a.generate(reqs[::-1], SETTINGS) == batched[::-1]
    if a.supports_loglikelihood:
        ll = np.array(a.loglikelihood(reqs))
        ll1 = np.array([a.loglikelihood([r])[0] for r in reqs])
        assert ll.shape == (3, 3) and np.all(ll < 0)
        np.testing.assert_allclose(ll, ll1, atol=1e-4)
    info = a.info()
    assert info["pretrained"] == str(tiny_dirs[name]) and a.fingerprint


@pytest.mark.parametrize("name", list(FAMILIES))
def test_the_audio_probe_runs_for_each_tiny_adapter(name, tiny_dirs, casu_small):
    from harness.config import EvalConfig
    from harness.run.data import CasuData
    from harness.run.evaluate import evaluate
    from harness.task.config import load_tasks

    a = make_adapter(name, {"pretrained": str(tiny_dirs[name]), "device": "cpu", "dtype": "float32"})
    ev = evaluate(
        a,
        [load_tasks()["contextual_reasoning"]],
        CasuData(casu_small),
        EvalConfig(progress=False, limit=4, probe_n=2, batch_size=2),  # --limit keeps whole families: one
    )
    # Random weights cannot show audio dependence; the probe must run and report, either way.
    assert ev["audio_probe"]["status"] in ("ok", "unchanged") and len(ev["audio_probe"]["questions"]) == 2
    assert ev["results"]["contextual_reasoning"]["PEB"]["n"] == 4 and not ev["errors"]


def test_missing_weights_and_unknown_names_fail_clearly(tmp_path):
    a = make_adapter("qwen2-audio", {"pretrained": str(tmp_path / "nothing-here")})
    with pytest.raises(AdapterError, match=r"qwen2-audio.*nothing-here.*pretrained=PATH"):
        a.generate(_requests()[:1], SETTINGS)
    a = make_adapter("qwen2.5-omni", {})  # the hub name, not downloadable here
    with pytest.raises(AdapterError, match=r"qwen2.5-omni.*Qwen/Qwen2.5-Omni-7B"):
        a.generate(_requests()[:1], SETTINGS)
    with pytest.raises(AdapterError, match="unknown model.*qwen2-audio"):
        make_adapter("qwen9-audio")
    with pytest.raises(ModelArgsError, match="bad --model_args"):  # bad input (exit 2); stops a run too
        make_adapter("random", {"colour": "red"})
    with pytest.raises(AdapterError, match="dtype='float8'"):
        make_adapter("qwen2-audio", {"pretrained": str(tmp_path), "dtype": "float8"}).generate(
            _requests()[:1], SETTINGS
        )


def test_salmonn_needs_a_checkout(tmp_path, monkeypatch):
    monkeypatch.delenv("SALMONN_PATH", raising=False)
    with pytest.raises(AdapterError, match="github.com/bytedance/SALMONN"):
        make_adapter("salmonn")
    with pytest.raises(AdapterError, match="not a SALMONN checkout"):
        make_adapter("salmonn", {"salmonn_path": str(tmp_path)})


def test_selecting_a_model_imports_only_what_it_needs():
    code = (
        "import sys; from model_adapters import make_adapter; a = make_adapter('random'); "
        "import harness.run.evaluate, harness.run.runner, harness.output.writer; "
        "print(sorted(m for m in ('torch', 'transformers', 'accelerate', 'faster_whisper') if m in "
        "sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_random_baseline_is_seeded_and_batch_independent():
    reqs = _requests()
    a, b = make_adapter("random", "seed=1"), make_adapter("random", "seed=2")
    assert a.generate(reqs, SETTINGS) == [a.generate([r], SETTINGS)[0] for r in reqs]
    assert a.generate(reqs, SETTINGS) == make_adapter("random", "seed=1").generate(reqs, SETTINGS)
    draws = [a.generate([Request(prompt=f"q{i}", options=list("wxyz"))], SETTINGS)[0] for i in range(40)]
    assert len(set(draws)) == 4
    other = [b.generate([Request(prompt=f"q{i}", options=list("wxyz"))], SETTINGS)[0] for i in range(40)]
    assert other != draws  # another seed, other draws
    assert a.generate([Request(prompt="describe")], SETTINGS) == [""]


@pytest.mark.slow
def test_cascade_and_blind_on_real_scene_audio(casu_small, tiny_dirs):
    from harness.run.conditions import FULL
    from harness.run.data import CasuData

    data = CasuData(casu_small)
    s = data.samples("contextual_reasoning")[0]
    audio = data.audio(s, FULL)
    casc = make_adapter("cascade")
    r = Request(prompt=s.question, audio=audio, options=s.options, id=s.id)
    ctx = casc._messages(r)[-1]["content"]
    assert "Speech transcript:" in ctx and len(ctx) > len(s.question) + 60  # Whisper heard the speech
    scores = casc.loglikelihood([r])[0]
    assert len(scores) == len(s.options) and all(np.isfinite(scores))
    desc = casc.generate([Request(prompt="Describe", audio=audio, kind="describe")], SETTINGS)[0]
    assert desc.startswith('Someone says: "')
    with_captioner = make_adapter(
        "cascade", {"captioner": "qwen2-audio", "captioner_pretrained": str(tiny_dirs["qwen2-audio"])}
    )
    ctx2 = with_captioner._messages(r)[-1]["content"]
    assert "Sound description:" in ctx2 and "Speech transcript:" in ctx2
    blind = make_adapter("blind")
    assert blind._messages(r)[-1]["content"] == s.question  # no transcript, no audio
    assert len(blind.loglikelihood([r])[0]) == len(s.options)


@pytest.mark.slow
def test_openai_audio_adapter_against_transformers_serve(tiny_dirs):
    """`transformers serve` accepts input_audio for a tiny Qwen2-Audio folder: its greedy replies
    equal the in-process adapter's on the same (16-bit) audio, and change with the audio."""
    import io

    import soundfile as sf

    path = str(tiny_dirs["qwen2-audio"])
    with transformers_serve(path) as url:
        api = make_adapter(
            "openai-audio", {"model": path, "base_url": url, "concurrency": 2, "max_retries": 1}
        )
        local = make_adapter("qwen2-audio", {"pretrained": path, "dtype": "float32"})
        reqs = _requests()
        for r in reqs:  # what the server decodes: the adapter sends 16-bit PCM WAV
            buf = io.BytesIO()
            sf.write(buf, r.audio, 16000, format="WAV", subtype="PCM_16")
            r.audio = sf.read(io.BytesIO(buf.getvalue()), dtype="float32")[0]
        served = api.generate(reqs, SETTINGS)
        assert served == local.generate(reqs, SETTINGS)
        assert len(set(served)) > 1


def test_openai_audio_request_shape_and_key(monkeypatch):
    monkeypatch.setenv("MY_KEY", "sk-very-secret")
    a = make_adapter(
        "openai-audio",
        {
            "model": "gpt-4o-audio-preview",
            "base_url": "http://127.0.0.1:9/v1",
            "api_key_env": "MY_KEY",
            "max_retries": 0,
        },
    )
    msgs = a.messages(Request(prompt="What is happening?", audio=np.zeros(1600, np.float32)))
    part = msgs[-1]["content"][0]
    assert part["type"] == "input_audio" and part["input_audio"]["format"] == "wav"
    assert "sk-very-secret" not in repr(a.api)
    # no server there: this request fails (a failed sample, the run goes on), named, without the key
    with pytest.raises(BackendError) as err:
        a.generate([Request(prompt="x")], SETTINGS)
    assert err.value.transient and not isinstance(err.value, STOPS_RUN)
    assert "sk-very-secret" not in str(err.value) and "gave up" in str(err.value)


def test_harness_list_shows_every_adapter():
    from model_adapters.registry import adapter_names

    rc, out, err = harness_cli("list")
    assert rc == 0, err
    for name in adapter_names():
        assert f"  {name} " in out
    assert "qwen2.5-omni" in out and "PEB" in out
