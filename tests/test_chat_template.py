"""lm-eval's --system_instruction, --apply_chat_template [NAME], --num_fewshot and
--fewshot_as_multiturn, on a tiny random-weight Qwen2-Audio (its real processor and chat
template) and on small echo adapters: the system turn reaches the rendered prompt, a named
template is used and an unknown one refused before any weights load, the effective settings
are recorded, and the response cache never serves an answer given under another system prompt."""

from __future__ import annotations

import json

import numpy as np
import pytest
import tiny_models as tiny
from conftest import tiny_dataset
from helpers import harness_cli as cli
from helpers import harness_run

from model_adapters import GenerationSettings, Request, make_adapter
from model_adapters.base import Adapter
from model_adapters.hf_models import Qwen2Audio

TERSE = "TERSE " + tiny.QWEN_AUDIO_TEMPLATE  # a second template: same structure, recognisable prefix
FAST = "max_new_tokens=2"


@pytest.fixture(scope="module")
def ds(tmp_path_factory):
    return tiny_dataset(tmp_path_factory.mktemp("ct") / "ds", 4, "ct")


@pytest.fixture(scope="module")
def qwen_dir(tmp_path_factory):
    d = tiny.build_qwen2_audio(tmp_path_factory.mktemp("ct") / "qwen2-audio")
    (d / "additional_chat_templates").mkdir()
    (d / "additional_chat_templates" / "terse.jinja").write_text(TERSE)
    return d


class SpyQwen(Qwen2Audio):
    """The real Qwen2-Audio adapter, recording every rendered prompt and every weight load."""

    prompts: list = []
    loads: list = []

    def prompt_text(self, req):
        text = super().prompt_text(req)
        SpyQwen.prompts.append(text)
        return text

    def load_model(self, path, **kw):
        SpyQwen.loads.append(path)
        return super().load_model(path, **kw)


def qwen_args(d) -> dict:
    return {"pretrained": str(d), "device": "cpu", "dtype": "float32"}


@pytest.fixture
def spy():
    SpyQwen.prompts.clear()
    SpyQwen.loads.clear()
    return SpyQwen


def test_system_instruction_reaches_the_rendered_prompt_and_is_recorded(ds, qwen_dir, spy):
    from harness import simple_evaluate

    sys_text = "You are a careful listener. Answer with one letter."
    res = simple_evaluate(
        "test_chat_template:SpyQwen",
        qwen_args(qwen_dir),
        tasks="role_inference",
        dataset=str(ds),
        probe=False,
        limit=2,
        gen_kwargs=FAST,
        system_instruction=sys_text,
    )
    assert not res.errors and len(spy.prompts) == 2
    for p in spy.prompts:  # the processor's chat template made it a system turn, before the user turn
        assert p.startswith(f"<|im_start|>system\n{sys_text}<|im_end|>\n<|im_start|>user\n"), p
        assert "<|AUDIO|>" in p and not p.startswith("TERSE")
    cfg = res["config"]
    assert cfg["system_instruction"] == sys_text
    assert cfg["apply_chat_template"] is True and cfg["chat_template_name"] is None  # always, for an audio LM
    assert "audio placeholder" in cfg["chat_template_how"]
    assert (cfg["num_fewshot"], cfg["fewshot_as_multiturn"]) == (0, False)
    assert all(r["system"] == sys_text for r in res.samples["role_inference"])
    spy.prompts.clear()  # without the flag: no system turn (Qwen2-Audio has no default system prompt)
    res = simple_evaluate(
        "test_chat_template:SpyQwen",
        qwen_args(qwen_dir),
        tasks="role_inference",
        dataset=str(ds),
        probe=False,
        limit=2,
        gen_kwargs=FAST,
        cache="off",
    )
    assert spy.prompts and all(p.startswith("<|im_start|>user\n") for p in spy.prompts)
    assert res["config"]["system_instruction"] is None and res["config"]["apply_chat_template"] is True


def test_a_named_template_is_used_and_changes_the_fingerprint(ds, qwen_dir, spy):
    from harness import simple_evaluate

    base = simple_evaluate(
        "test_chat_template:SpyQwen",
        qwen_args(qwen_dir),
        tasks="role_inference",
        dataset=str(ds),
        probe=False,
        limit=1,
        gen_kwargs=FAST,
        apply_chat_template=True,
    )
    assert spy.prompts and not any(p.startswith("TERSE") for p in spy.prompts)  # True = the default template
    spy.prompts.clear()
    res = simple_evaluate(
        "test_chat_template:SpyQwen",
        qwen_args(qwen_dir),
        tasks="role_inference",
        dataset=str(ds),
        probe=False,
        limit=1,
        gen_kwargs=FAST,
        apply_chat_template="terse",
    )
    assert (
        not res.errors and spy.prompts and all(p.startswith("TERSE <|im_start|>user\n") for p in spy.prompts)
    )
    assert res["config"]["chat_template_name"] == "terse" and res["model"]["info"]["chat_template"] == "terse"
    assert res["model"]["fingerprint"] != base["model"]["fingerprint"]  # another template: other cache keys
    assert "chat_template" not in base["model"]["info"]  # the default keeps the fingerprint it always had
    a = make_adapter("qwen2-audio", qwen_args(qwen_dir))
    assert a.fingerprint == base["model"]["fingerprint"]


def test_an_unknown_template_name_is_refused_before_the_weights_load(ds, qwen_dir, spy, tmp_path):
    from harness import UsageError, simple_evaluate

    with pytest.raises(
        UsageError,
        match=r"--apply_chat_template fancy: .* no chat template named 'fancy'; "
        r"available: default, terse",
    ):
        simple_evaluate(
            "test_chat_template:SpyQwen",
            qwen_args(qwen_dir),
            tasks="role_inference",
            dataset=str(ds),
            probe=False,
            limit=1,
            apply_chat_template="fancy",
        )
    assert spy.loads == [] and spy.prompts == []
    rc, _, err = cli(
        "--model",
        "test_chat_template:SpyQwen",
        "--model_args",
        f"pretrained={qwen_dir},device=cpu",
        "--tasks",
        "role_inference",
        "--dataset",
        str(ds),
        "--output_path",
        str(tmp_path / "r"),
        "--quiet",
        "--apply_chat_template",
        "fancy",
    )
    assert rc == 2 and "available: default, terse" in err and len(err.strip().splitlines()) == 1
    assert spy.loads == [] and not list(tmp_path.glob("r/*/results_*.json"))


@pytest.mark.parametrize("build", [tiny.build_qwen2_5_omni, tiny.build_qwen2_audio])
def test_named_templates_of_hand_built_processors(build, tmp_path):
    """Omni / Phi-4 processors are assembled by the adapter: their named templates must survive."""
    d = build(tmp_path / "m")
    (d / "additional_chat_templates").mkdir()
    (d / "additional_chat_templates" / "terse.jinja").write_text(
        "TERSE " + (d / "chat_template.jinja").read_text() if (d / "chat_template.jinja").is_file() else TERSE
    )
    name = "qwen2.5-omni" if build is tiny.build_qwen2_5_omni else "qwen2-audio"
    a = make_adapter(name, qwen_args(d))
    assert a.chat_template_names() == ["terse"] and a._model is None  # the processor only
    a.set_chat_template("terse")
    req = Request(prompt="Who speaks?", audio=np.zeros(16000, np.float32), system="Be brief.")
    text = a.prompt_text(req)
    assert text.startswith("TERSE <|im_start|>system\nBe brief.<|im_end|>"), text
    assert len(a.generate([req], GenerationSettings(max_new_tokens=2))) == 1  # the processor takes it


# -- the response cache is keyed by the system instruction ------------------------------------------


class EchoSystem(Adapter):
    """Answers A, echoing the system turn it was given: a cached answer under another system prompt shows."""

    name = "echo-system"
    chat_template_use = "always"
    chat_template_how = "a test adapter"

    def generate(self, requests, settings):
        return [f"Answer: A (system: {r.system})" for r in requests]


def test_the_cache_never_reuses_an_answer_given_under_another_system_prompt(ds, tmp_path):
    from harness import simple_evaluate

    def go(system):
        res = simple_evaluate(
            "test_chat_template:EchoSystem",
            tasks="role_inference",
            dataset=str(ds),
            probe=False,
            output_path=tmp_path / "r",
            system_instruction=system,
        )
        return {r["response"] for r in res.samples["role_inference"]}, res["timing"]["cache_hits"]

    assert go(None) == ({"Answer: A (system: None)"}, 0)
    assert go("Be brief.") == ({"Answer: A (system: Be brief.)"}, 0)
    assert go("Be thorough.") == ({"Answer: A (system: Be thorough.)"}, 0)
    assert go("Be brief.") == ({"Answer: A (system: Be brief.)"}, 4)  # same system prompt: all from the cache
    assert go(None) == ({"Answer: A (system: None)"}, 4)


def test_each_adapter_turns_the_system_instruction_into_its_system_turn():
    from model_adapters.cascade import Cascade
    from model_adapters.openai_audio import OpenAIAudio
    from model_adapters.salmonn import salmonn_prompt

    req = Request(prompt="Who speaks?", system="Be brief.")
    assert Cascade(transcriber="none")._messages(req)[0] == {"role": "system", "content": "Be brief."}
    api = OpenAIAudio(model="m", base_url="http://127.0.0.1:9/v1", system_prompt="default one")
    assert api.messages(req)[0] == {
        "role": "system",
        "content": "Be brief.",
    }  # replaces the adapter's default
    assert api.messages(Request(prompt="Q"))[0] == {"role": "system", "content": "default one"}
    assert salmonn_prompt(req) == "Be brief.\nUSER: <Speech><SpeechHere></Speech> Who speaks?\nASSISTANT:"
    assert salmonn_prompt(Request(prompt="Q")) == "USER: <Speech><SpeechHere></Speech> Q\nASSISTANT:"


def test_effective_chat_template_per_adapter():
    from model_adapters.cascade import Cascade

    c = Cascade(transcriber="none")
    assert c.set_chat_template(True)["apply_chat_template"] is True and c.chat_template_name is None
    with pytest.raises(
        ValueError, match=r"--apply_chat_template chatml: --model cascade .*available: default$"
    ):
        c.set_chat_template("chatml")
    r = make_adapter("random")
    assert r.set_chat_template(None) == {
        "apply_chat_template": False,
        "chat_template_name": None,
        "chat_template_how": r.chat_template_how,
    }
    with pytest.raises(ValueError, match="--apply_chat_template: --model random renders no prompt"):
        r.set_chat_template(True)


# -- the CLI: bad combinations are exit 2, one line, before anything runs ----------------------------


@pytest.mark.parametrize(
    "argv, msg",
    [
        (["--num_fewshot", "5"], "--num_fewshot 5: CASU tasks are zero-shot"),
        (["--num_fewshot", "-1"], "--num_fewshot/-f: must be >= 0"),
        (["--fewshot_as_multiturn"], "--fewshot_as_multiturn: needs few-shot examples"),
        (["--num_fewshot", "0", "--fewshot_as_multiturn"], "--fewshot_as_multiturn: needs few-shot examples"),
        (["--apply_chat_template"], "--apply_chat_template: --model random renders no prompt"),
        (["--apply_chat_template", "chatml"], "--apply_chat_template: --model random renders no prompt"),
        (["--system_instruction", " "], "--system_instruction: empty text"),
    ],
)
def test_cli_refuses_bad_combinations(ds, tmp_path, argv, msg):
    rc, _, err = harness_run(ds, tmp_path / "r", *argv)
    assert rc == 2 and msg in err, err
    assert "Traceback" not in err and not list(tmp_path.glob("r/*/results_*.json"))


def test_cli_accepts_zero_shot_and_records_it(ds, tmp_path):
    rc, _, err = harness_run(ds, tmp_path / "r", "--num_fewshot", "0", "--system_instruction", "Be brief.")
    assert rc == 0, err
    cfg = json.loads(next((tmp_path / "r").glob("*/casu_results_*.json")).read_text())["config"]
    assert cfg["num_fewshot"] == 0 and cfg["system_instruction"] == "Be brief."
    assert cfg["apply_chat_template"] is False and "renders no prompt" in cfg["chat_template_how"]


def test_voxtral_keeps_the_system_instruction_where_its_tokenizer_refuses_a_system_turn(tmp_path):
    """mistral-common tokenizers before v11 refuse a system message beside audio, so with audio
    the instruction leads the user turn (a system turn would fail every sample); without audio
    it stays a system turn."""
    a = make_adapter("voxtral", qwen_args(tiny.build_voxtral(tmp_path / "v")))
    req = Request(prompt="Who speaks?", audio=np.zeros(16000, np.float32), system="Be brief.")
    assert len(a.generate([req], GenerationSettings(max_new_tokens=2))) == 1
    conv = a.conversation(req)
    assert [m["role"] for m in conv] == ["user"] and conv[0]["content"][-1][
        "text"
    ] == "Be brief.\n\nWho speaks?"
    text_only = a.conversation(Request(prompt="Who speaks?", system="Be brief."))
    assert text_only[0] == {"role": "system", "content": "Be brief."}
