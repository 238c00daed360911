"""Issue 25: Hugging Face and lm-eval habits, round 2. Hub failures of the installed client as
one line and exit 5 (a local server that drops connections, refuses them or never answers),
strict model arguments, pr-eval-results bound to its model repo, lm-eval-shaped outputs and a
notebook-first simple_evaluate. Nothing here touches the network."""
from __future__ import annotations

import contextlib
import io
import json
import socket
import threading
from pathlib import Path

import pytest

from fake_hub import FakeHub
from model_adapters.baselines import RandomBaseline
from test_harness_integrity import tiny_dataset


@pytest.fixture(scope="module")
def ds(tmp_path_factory) -> Path:
    return tiny_dataset(tmp_path_factory.mktemp("hf2") / "ds", 10, "hf2")


def cli(*argv, main=None) -> tuple[int, str, str]:
    if main is None:
        from harness.__main__ import main
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main(list(argv))
        except SystemExit as e:
            rc = e.code
    return rc, out.getvalue(), err.getvalue()


def run(ds, out, *argv, model="random"):
    return cli("--model", model, "--tasks", "role_inference", "--dataset", str(ds), "--output_path", str(out),
               "--quiet", "--no_probe", *argv)


class Ckpt(RandomBaseline):
    """The random chooser under a checkpoint name."""
    name = "ckpt"

    def __init__(self, pretrained: str = "none", seed: int = 0):
        super().__init__(seed=seed)
        self.model_args["pretrained"] = pretrained


# -- 1. Hub failures of the installed client ------------------------------------------------------

class BadHub:
    """A local endpoint that drops every connection, refuses them (nothing listens) or accepts and
    never answers ("hang")."""

    def __init__(self, mode: str):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(32)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.held: list = []
        if mode == "refuse":
            self.sock.close()
            return
        threading.Thread(target=self._serve, args=(mode,), daemon=True).start()

    def _serve(self, mode):
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            if mode == "drop":
                c.close()
            else:
                self.held.append(c)

    def close(self):
        self.sock.close()
        for c in self.held:
            c.close()


@pytest.fixture
def online(monkeypatch):
    import huggingface_hub.constants as C
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(C, "HF_HUB_OFFLINE", False)
    monkeypatch.setenv("HF_TOKEN", "hf_FAKEtoken1234567890")
    monkeypatch.setenv("CASU_HUB_TIMEOUT", "1")
    return C


@pytest.fixture
def full_run(ds, tmp_path):
    out = tmp_path / "r"
    rc, _, err = run(ds, out, "--model_args", "pretrained=Org/M", "--log_samples", model="test_hf_habits2:Ckpt")
    assert rc == 0, err
    return out


@pytest.mark.parametrize("mode", ["drop", "refuse", "hang"])
def test_every_hub_command_is_one_line_and_exit_5_when_the_network_fails(mode, full_run, ds, tmp_path, online,
                                                                         monkeypatch):
    from casu_dataset.cli import main as dataset_main
    bad = BadHub(mode)
    monkeypatch.setattr(online, "ENDPOINT", bad.url)
    folder = tmp_path / "dsfolder"
    folder.mkdir()
    (folder / "README.md").write_text("---\npretty_name: t\n---\n# t\n")
    try:
        got = {
            "push": cli("push", "--repo", "me/res", "--output_path", str(full_run)),
            "pr-eval-results": cli("pr-eval-results", "--model_repo", "Org/M", "--dataset_id", "me/casu",
                                   "--output_path", str(full_run)),
            "casu_dataset push": cli("push", "--repo", "me/tiny", "--folder", str(folder), main=dataset_main),
            "run": run(ds, tmp_path / "auto", "--hf_hub_log_args", "hub_results_org=me,push_results_to_hub=true"),
        }
    finally:
        bad.close()
    for what, (rc, out, err) in got.items():
        lines = err.strip().splitlines()
        assert rc == 5, (what, rc, err)
        assert len(lines) == 1 and "Traceback" not in err and "hf_FAKEtoken" not in err, (what, err)
        assert "upload failed" in err, (what, err)
        if mode == "hang":
            assert "no answer within 1 s" in err and "CASU_HUB_TIMEOUT" in err, (what, err)
    rc, out, err = got["run"]
    assert "| random |" in out and "retry: python -m harness push" in err  # the table, then the retry line


def test_a_bad_hub_timeout_is_a_usage_error(full_run, online, monkeypatch):
    monkeypatch.setenv("CASU_HUB_TIMEOUT", "soon")
    rc, _, err = cli("push", "--repo", "me/res", "--output_path", str(full_run))
    assert rc == 2 and "CASU_HUB_TIMEOUT='soon'" in err


def test_a_bug_is_not_reported_as_a_network_failure():
    from casu_dataset import hub
    assert not hub.is_network_error(KeyError("x")) and not hub.is_network_error(TypeError("y"))
    import httpx2
    assert hub.is_network_error(httpx2.ConnectError("refused")) and hub.is_network_error(httpx2.ReadTimeout(""))


# -- 3. pr-eval-results proposes only the run of its model repo ---------------------------------------

def test_pr_eval_results_refuses_another_checkpoints_scores(ds, tmp_path, online, monkeypatch):
    import base64

    import yaml
    out = tmp_path / "r"
    assert run(ds, out)[0] == 0  # the random baseline: no checkpoint
    rc, _, err = cli("pr-eval-results", "--model_repo", "Qwen/Qwen2.5-Omni-7B", "--dataset_id", "me/casu",
                     "--output_path", str(out), "--dry_run")
    assert rc == 2 and "--model_repo Qwen/Qwen2.5-Omni-7B" in err and "--model random" in err, err
    assert "--allow_other_checkpoint" in err and len(err.strip().splitlines()) == 1
    assert run(ds, out, "--model_args", "pretrained=Org/Other", model="test_hf_habits2:Ckpt")[0] == 0
    assert run(ds, out, "--model_args", "pretrained=Org/M", model="test_hf_habits2:Ckpt")[0] == 0
    # several checkpoints in the folder: the model repo's own run is chosen
    rc, text, err = cli("pr-eval-results", "--model_repo", "org/m", "--dataset_id", "me/casu",
                        "--output_path", str(out), "--dry_run")
    assert rc == 0 and "checkpoint Org/M" in text and "OVERRIDE" not in text, err
    rc, _, err = cli("pr-eval-results", "--model_repo", "Org/M", "--dataset_id", "me/casu", "--output_path",
                     str(out), "--checkpoint", "Org/Other", "--dry_run")
    assert rc == 2 and "checkpoint 'Org/Other'" in err
    hub = FakeHub()
    monkeypatch.setattr(online, "ENDPOINT", hub.url)
    try:
        rc, text, err = cli("pr-eval-results", "--model_repo", "Org/M", "--dataset_id", "me/casu", "--output_path",
                            str(out), "--checkpoint", "Org/Other", "--allow_other_checkpoint")
    finally:
        hub.close()
    assert rc == 0, err
    f = next(line["value"] for line in hub.commit_lines() if line["key"] == "file")
    entries = yaml.safe_load(base64.b64decode(f["content"]))
    assert all("OVERRIDE: checkpoint Org/Other proposed for Org/M with --allow_other_checkpoint" in e["notes"]
               for e in entries)


# -- 2. model arguments reach the loader, or are refused by name --------------------------------------

def test_unknown_and_unsupported_model_args_are_refused_by_name(ds, tmp_path, monkeypatch):
    import importlib.util
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: None if n == "bitsandbytes" else real(n, *a))
    cases = [("revision=abc123,typo_dtpye=bfloat16", "typo_dtpye"),
             ("load_in_4bit=true", "needs bitsandbytes"),
             ("load_in_4bit=yes", "load_in_4bit='yes'"),
             ("peft=my/adapter", "peft=my/adapter: qwen2-audio does not support it"),
             ("torch_dtype=bfloat16", "use dtype="),
             ("attn_implementation=flash", "attn_implementation='flash'"),
             ("bnb_4bit_quant_type=nf4", "only with load_in_4bit=true"),
             (f"pretrained={tmp_path},revision=abc123", "is a local folder, which has no revisions")]
    for args, why in cases:
        rc, _, err = run(ds, tmp_path / "r", "--model_args", args, model="qwen2-audio")
        assert rc == 2 and why in err and len(err.strip().splitlines()) == 1, (args, err)
    assert not (tmp_path / "r" / "qwen2-audio").exists()  # nothing was run or recorded


def _hub_cache_copy(src: Path, cache: Path, repo: str, sha: str, ref: str) -> None:
    """A Hub cache entry for `repo` at commit `sha` (branch `ref`), as `hf download` leaves it."""
    import shutil
    base = cache / ("models--" + repo.replace("/", "--"))
    shutil.copytree(src, base / "snapshots" / sha)
    (base / "refs").mkdir(parents=True)
    (base / "refs" / ref).write_text(sha)


def test_revision_reaches_from_pretrained_and_is_recorded_as_the_model_sha(ds, tmp_path, monkeypatch):
    import huggingface_hub.constants as C
    import tiny_models as tiny

    from harness import simple_evaluate
    from model_adapters.base import AdapterError
    from model_adapters.registry import make_adapter
    src = tiny.build_qwen2_audio(tmp_path / "tiny")
    sha = "0123456789abcdef0123456789abcdef01234567"
    _hub_cache_copy(src, tmp_path / "hub", "casu-test/tiny-qwen2-audio", sha, "v1")
    monkeypatch.setattr(C, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(C, "HF_HUB_OFFLINE", True)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    args = {"pretrained": "casu-test/tiny-qwen2-audio", "device": "cpu", "dtype": "float32"}
    with pytest.raises(AdapterError, match="cannot load"):  # no `main` in the cache: the revision is what loads
        make_adapter("qwen2-audio", args)._load()
    res = simple_evaluate("qwen2-audio", dict(args, revision="v1"), tasks="role_inference", dataset=str(ds),
                          limit=2, probe=False)
    cfg = res["config"]
    assert cfg["model_revision"] == "v1" and cfg["model_sha"] == sha and cfg["model_num_parameters"] > 0
    assert cfg["model_dtype"] == "torch.float32" and "revision=v1" in cfg["model_args"]
    assert res.document["model"]["meta"]["model_sha"] == sha
