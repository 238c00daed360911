"""Hub failures and bad Hub inputs: every command that talks to the Hub (harness push and
pr-eval-results, a run with push_results_to_hub, casu_dataset push) ends in one line and exit 5
when the network drops, refuses, hangs or the token is refused, never a traceback or the token;
bad repo ids, missing results and push settings that cannot work are refused before any work.
Nothing here touches the network: the Hub is a local socket or tests/fake_hub.py."""

from __future__ import annotations

import os
import socket
import threading
from pathlib import Path

import pytest
from bad_input_corpus import Ctx, E, Outcome, call, casu, check_case, duplicate_ids, harness
from conftest import call_main, harness_run, tiny_dataset
from fake_hub import FakeHub

from casu_dataset.core.env_vars import environment


@pytest.fixture(scope="module")
def ds(tmp_path_factory) -> Path:
    return tiny_dataset(tmp_path_factory.mktemp("hub") / "ds", 10, "hub")


def cli(*argv, main=None) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of `python -m harness ARGV` (or of another CLI's `main`)."""
    if main is None:
        from harness.cli import main
    return call_main(main, argv)


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
def full_run(ds, tmp_path, ckpt_model):
    out = tmp_path / "r"
    rc, _, err = harness_run(ds, out, "--model_args", "pretrained=Org/M", "--log_samples", model=ckpt_model)
    assert rc == 0, err
    return out


def push_offline(c: Ctx) -> Outcome:
    from harness.cli import main

    with environment({"HF_HUB_OFFLINE": "1", "HF_TOKEN": "hf_FAKEtokenFAKEtokenFAKEtoken1234"}):
        return call(main, ["push", "--repo", "me/results", "--output_path", str(c.extra["results"])])


# -- the corpus of bad inputs to the Hub commands: (id, run(ctx) -> Outcome, expectation) -------

CASES = [
    ("push-offline", push_offline, (E, 5, "me/results", "offline")),
    (
        "push-public-typo",
        lambda c: harness("push", "--repo", "me/r", "--output_path", str(c.extra["results"]), "--publik"),
        (E, 2, "--publik"),
    ),
    (
        "pr-eval-results-bad-model-repo",
        lambda c: harness(
            "pr-eval-results",
            "--model_repo",
            "noslash",
            "--dataset_id",
            "a/b",
            "--output_path",
            str(c.extra["results"]),
            "--dry_run",
        ),
        (E, 2, "--model_repo 'noslash'"),
    ),
    (
        "pr-eval-results-no-dataset-id",
        lambda c: harness("pr-eval-results", "--model_repo", "a/b", "--output_path", str(c.extra["results"])),
        (E, 2, "--dataset_id"),
    ),
    (
        "pr-eval-results-no-results",
        lambda c: harness(
            "pr-eval-results",
            "--model_repo",
            "a/b",
            "--dataset_id",
            "c/d",
            "--output_path",
            str(c.tmp),
            "--dry_run",
        ),
        (E, 2, "--output_path", "no complete results"),
    ),
    (
        "push-bad-repo",
        lambda c: harness("push", "--repo", "noslash", "--output_path", str(c.extra["results"]), "--dry_run"),
        (E, 2, "--repo 'noslash'"),
    ),
    (
        "push-no-results",
        lambda c: harness("push", "--repo", "me/r", "--output_path", str(c.tmp), "--dry_run"),
        (E, 2, "--output_path", "no complete results"),
    ),
    (
        "push-output-path-missing",
        lambda c: harness("push", "--repo", "me/r", "--output_path", str(c.tmp / "nope"), "--dry_run"),
        (E, 2, "--output_path", "no complete results"),
    ),
    (
        "push-dataset-missing-folder",
        lambda c: casu("push", "--repo", "me/x", "--folder", str(c.tmp / "nope")),
        (E, 2, "--folder", "nope", "not a dataset folder"),
    ),
]


def test_case_ids_are_unique():
    assert duplicate_ids(CASES) == []


@pytest.mark.parametrize("case_id, run, expect", CASES, ids=[c[0] for c in CASES])
def test_bad_input(corpus_ctx, tmp_path, case_id, run, expect):
    check_case(corpus_ctx, tmp_path, case_id, run, expect)


# -- the network fails, or the Hub refuses --------------------------------------------------------


@pytest.mark.parametrize("mode", ["drop", "refuse", "hang"])
def test_every_hub_command_is_one_line_and_exit_5_when_the_network_fails(
    mode, full_run, ds, tmp_path, online_with_token, monkeypatch
):
    from casu_dataset.cli import main as dataset_main

    bad = BadHub(mode)
    monkeypatch.setattr(online_with_token, "ENDPOINT", bad.url)
    folder = tmp_path / "dsfolder"
    folder.mkdir()
    (folder / "README.md").write_text("---\npretty_name: t\n---\n# t\n")
    from casu_dataset.formats.build_manifest import identity, write

    write(folder, identity(None, {}))  # push sends a build's files: a record of this one-file build
    try:
        got = {
            "push": cli("push", "--repo", "me/res", "--output_path", str(full_run)),
            "pr-eval-results": cli(
                "pr-eval-results",
                "--model_repo",
                "Org/M",
                "--dataset_id",
                "me/casu",
                "--output_path",
                str(full_run),
            ),
            "casu_dataset push": cli("push", "--repo", "me/tiny", "--folder", str(folder), main=dataset_main),
            "run": harness_run(
                ds, tmp_path / "auto", "--hf_hub_log_args", "hub_results_org=me,push_results_to_hub=true"
            ),
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


def test_a_real_process_prints_one_line_quickly_when_the_hub_drops_connections(full_run, tmp_path):
    """In a process of its own (huggingface_hub's retry warnings would reach its stderr), the
    pull request fails fast: the repo is looked up first, and the upload's retries are quiet."""
    import subprocess
    import sys
    import time

    bad = BadHub("drop")
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    env.update(HF_ENDPOINT=bad.url, HF_TOKEN="hf_FAKEtoken1234567890", HF_HOME=str(tmp_path / "hf"))
    t0 = time.time()
    try:
        p = subprocess.run(
            [
                sys.executable,
                "-m",
                "harness",
                "pr-eval-results",
                "--model_repo",
                "Org/M",
                "--dataset_id",
                "me/casu",
                "--output_path",
                str(full_run),
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            cwd=Path(__file__).parent.parent,
        )
    finally:
        bad.close()
    assert p.returncode == 5 and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert "Retrying" not in p.stderr and time.time() - t0 < 20


def test_upload_retries_are_quiet_unless_info_was_asked_for():
    import logging

    from casu_dataset.core import hub

    log = logging.getLogger("huggingface_hub.utils._http")
    before = log.level
    with hub._quiet_retries():
        assert not log.isEnabledFor(logging.WARNING)
    assert log.level == before
    logging.getLogger("huggingface_hub").setLevel(logging.INFO)
    try:
        with hub._quiet_retries():
            assert log.isEnabledFor(logging.WARNING)  # --verbosity INFO: the retries are shown
    finally:
        logging.getLogger("huggingface_hub").setLevel(logging.NOTSET)


def test_an_unauthorized_token_is_one_line_and_exit_5(full_run, online_with_token, monkeypatch):
    hub = FakeHub(status=401)
    monkeypatch.setattr(online_with_token, "ENDPOINT", hub.url)
    try:
        rc, _, err = cli("push", "--repo", "me/res", "--output_path", str(full_run))
    finally:
        hub.close()
    assert rc == 5 and "401" in err and len(err.strip().splitlines()) == 1 and "hf_FAKEtoken" not in err, err


def test_a_bad_hub_timeout_is_a_usage_error(full_run, online_with_token, monkeypatch):
    monkeypatch.setenv("CASU_HUB_TIMEOUT", "soon")
    rc, _, err = cli("push", "--repo", "me/res", "--output_path", str(full_run))
    assert rc == 2 and "CASU_HUB_TIMEOUT='soon'" in err


def test_a_bug_is_not_reported_as_a_network_failure():
    from casu_dataset.core import hub

    assert not hub.is_network_error(KeyError("x")) and not hub.is_network_error(TypeError("y"))
    import httpx2

    assert hub.is_network_error(httpx2.ConnectError("refused")) and hub.is_network_error(
        httpx2.ReadTimeout("")
    )


def offline(monkeypatch):
    """The Hub client told to stay offline, as HF_HUB_OFFLINE=1 does."""
    import huggingface_hub.constants as C

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(C, "HF_HUB_OFFLINE", True)


def test_hub_errors_are_one_line_with_exit_5(two_runs, monkeypatch):
    import huggingface_hub.constants as C

    monkeypatch.setenv("HF_TOKEN", "hf_FAKEtoken1234567890")
    offline(monkeypatch)
    rc, out, err = cli(
        "pr-eval-results",
        "--model_repo",
        "Org/M",
        "--dataset_id",
        "casu-org/casu",
        "--output_path",
        str(two_runs),
    )
    assert rc == 5 and len(err.strip().splitlines()) == 1 and "offline" in err and "Traceback" not in err
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setattr(C, "HF_HUB_OFFLINE", False)
    hub = FakeHub(status=403)
    monkeypatch.setattr(C, "ENDPOINT", hub.url)
    try:
        rc, out, err = cli(
            "pr-eval-results",
            "--model_repo",
            "Org/M",
            "--dataset_id",
            "casu-org/casu",
            "--output_path",
            str(two_runs),
        )
    finally:
        hub.close()
    assert rc == 5 and len(err.strip().splitlines()) == 1 and "--model_repo Org/M" in err, err
    assert "hf_FAKEtoken" not in err
    rc, out, _ = cli("push", "--help")
    assert rc == 0 and "5  push" in out


def test_a_hub_failure_after_the_run_keeps_the_results_and_names_the_retry(ds, tmp_path, monkeypatch, online):
    import shlex

    import huggingface_hub.constants as C

    monkeypatch.setenv("HF_TOKEN", "hf_FAKEtoken1234567890")
    bad = FakeHub(status=403)
    monkeypatch.setattr(C, "ENDPOINT", bad.url)
    try:
        rc, out, err = harness_run(
            ds,
            tmp_path / "r",
            "--log_samples",
            "--hf_hub_log_args",
            "hub_results_org=me,push_results_to_hub=true",
        )
    finally:
        bad.close()
    assert rc == 5 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert "me/casu-results" in err and "403" in err and "hf_FAKEtoken" not in err
    saved = next((tmp_path / "r").glob("*/casu_results_*.json"))
    assert str(saved) in err and "| random |" in out  # the run is on disk and its table printed
    retry = shlex.split(err.split("retry: ")[1])
    assert retry[:4] == ["python", "-m", "harness", "push"] and "--no_samples" in retry
    good = FakeHub()
    monkeypatch.setattr(C, "ENDPOINT", good.url)
    try:
        rc, out, err = cli(*retry[3:])
    finally:
        good.close()
    assert rc == 0, err
    sent = good.committed()["me/casu-results"]
    assert f"random/{saved.name}" in sent and not [p for p in sent if "/samples_" in p]


def test_a_push_that_cannot_happen_is_refused_before_anything_loads(ds, tmp_path, monkeypatch):
    from harness import UsageError, simple_evaluate

    missing = tmp_path / "no_dataset"  # the checks come first: the dataset is never opened
    cases = [
        ("push_results_to_hub=true", (), "needs hub_results_org=ORG"),
        ("hub_results_org=me,push_results_to_hub=true", ("--limit", "3"), "a --limit run is never pushed"),
        ("hub_results_org=me,push_results_to_hub=true,push_samples_to_hub=true", (), "needs --log_samples"),
        ("hub_results_org=me,push_samples_to_hub=true", ("--log_samples",), "also set push_results_to_hub"),
        (
            "hub_results_org=me,push_results_to_hub=true,push_samples_to_hub=true,details_repo_name=a..b",
            ("--log_samples",),
            "details_repo_name 'me/a..b'",
        ),
    ]
    for log_args, extra, why in cases:
        rc, out, err = harness_run(missing, tmp_path / "r", "--hf_hub_log_args", log_args, *extra)
        assert rc == 2 and "--hf_hub_log_args" in err and why in err and len(err.strip().splitlines()) == 1, (
            err
        )
    with pytest.raises(UsageError, match="push_results_to_hub=true: needs --output_path"):
        simple_evaluate(
            "random",
            tasks="role_inference",
            dataset=str(ds),
            probe=False,
            hf_hub_log_args="hub_results_org=me,push_results_to_hub=true",
        )
    from casu_dataset.core import hub

    monkeypatch.setattr(
        hub, "can_gate", lambda: False
    )  # a huggingface_hub without update_repo_settings(gated=)
    rc, _, err = harness_run(
        missing, tmp_path / "r", "--hf_hub_log_args", "hub_results_org=me,push_results_to_hub=true,gated=true"
    )
    assert rc == 2 and "gated=true" in err and "cannot gate" in err
    rc, _, err = harness_run(
        ds, tmp_path / "r2", "--hf_hub_log_args", "hub_results_org=me,gated=true"
    )  # no push: recorded
    assert rc == 0, err
