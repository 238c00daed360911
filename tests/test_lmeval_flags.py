"""lm-eval's run flags on `python -m harness`: each one works, or is refused in one line that names
the flag and says why (never argparse's usage dump). Run with the random model on the small real
dataset."""

import json
import logging
import shutil

from helpers import harness_cli, harness_run

from harness.config import AUTO_CPU_BATCH, resolve_batch_size


def _run(casu_small, tmp_path, *extra, out="out"):
    return harness_run(casu_small, tmp_path / out, "--limit", "8", *extra)


def _doc(tmp_path, out="out") -> dict:
    (path,) = sorted((tmp_path / out / "random").glob("casu_results_*.json"))[-1:]
    return json.loads(path.read_text())


def test_batch_size_auto_n_and_max_batch_size(casu_small, tmp_path):
    assert resolve_batch_size("auto:4", "cpu") == (AUTO_CPU_BATCH, False)
    assert resolve_batch_size("auto", "cuda:0", max_batch_size=16) == (16, True)
    assert resolve_batch_size(3, "cpu", max_batch_size=2) == (3, False)  # a size given is kept
    rc, out, err = _run(casu_small, tmp_path, "--batch_size", "auto:4", "--max_batch_size", "2")
    assert rc == 0, err
    assert _doc(tmp_path)["config"]["batch_size"] == "auto:4"
    rc, _, err = _run(casu_small, tmp_path, "--batch_size", "auto:x")
    assert rc == 2 and "--batch_size" in err and len(err.strip().splitlines()) == 1


def test_seed_takes_lm_evals_four_values(casu_small, tmp_path):
    rc, _, err = _run(casu_small, tmp_path, "--seed", "3,3,None,5")
    assert rc == 0, err
    config = _doc(tmp_path)["config"]
    assert config["seed"] == 3 and config["fewshot_random_seed"] == 5
    rc, _, err = _run(casu_small, tmp_path, "--seed", "3,4")
    # lm-eval takes 1, 3 or 4 values
    assert rc == 2 and "'3,4'" in err and "4 (python random, numpy, torch, few-shot" in err
    rc, _, err = _run(casu_small, tmp_path, "--seed", "1,2,3,4,5")
    assert rc == 2 and "at most four" in err and len(err.strip().splitlines()) == 1


def test_unknown_and_refused_flags_are_one_line(casu_small, tmp_path):
    for extra, says in [
        (["--bogus_flag"], "unrecognized arguments: --bogus_flag"),
        (["--samples", '{"role_inference": [0, 1]}'], "--samples: not supported"),
        (["--trust_remote_code"], "--trust_remote_code: random loads no code"),
        (["--cache_requests", "maybe"], "--cache_requests"),
    ]:
        rc, out, err = _run(casu_small, tmp_path, *extra, out="refused")
        assert rc == 2, (extra, err)
        assert says in err and "usage:" not in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "refused").exists()  # refused before anything was written


def test_cache_requests_refresh_and_delete(casu_small, tmp_path):
    assert _run(casu_small, tmp_path)[0] == 0
    first = _doc(tmp_path)["timing"]
    assert first["cache_hits"] == 0 and first["model_calls"] > 0
    assert _run(casu_small, tmp_path)[0] == 0
    assert _doc(tmp_path)["timing"]["cache_hits"] == first["units"]  # every answer from the cache
    assert _run(casu_small, tmp_path, "--cache_requests", "refresh")[0] == 0
    assert _doc(tmp_path)["timing"]["cache_hits"] == 0  # asked again, cached anew
    assert _run(casu_small, tmp_path)[0] == 0
    assert _doc(tmp_path)["timing"]["cache_hits"] == first["units"]
    assert _run(casu_small, tmp_path, "--cache_requests", "delete")[0] == 0
    assert _doc(tmp_path)["timing"]["cache_hits"] == 0


def test_check_integrity_hashes_every_file_of_the_folder(casu_small, tmp_path):
    copy = tmp_path / "data"
    shutil.copytree(casu_small, copy)
    assert _run(copy, tmp_path, "--check_integrity")[0] == 0
    # one byte changed, size kept, in a config the task does not read: only the full check sees it
    (victim,) = [p for p in copy.rglob("*.parquet") if "scene_description" in str(p)][:1]
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0xFF
    victim.write_bytes(bytes(data))
    assert _run(copy, tmp_path)[0] == 0
    rc, _, err = _run(copy, tmp_path, "--check_integrity")
    assert rc == 2 and victim.name in err, err


def test_show_config_prints_every_tasks_yaml(casu_small, tmp_path):
    rc, out, err = _run(casu_small, tmp_path, "--show_config")
    assert rc == 0, err
    shown = out.split("--- config ---", 1)[1]
    assert "task_configs:" in shown and "role_inference:" in shown and "prompt_template:" in shown


def test_a_failed_run_creates_no_output_folder(tmp_path):
    out = tmp_path / "new" / "results"
    rc, _, err = harness_cli(
        "--model", "random", "--dataset", str(tmp_path / "missing"), "--output_path", str(out)
    )
    assert rc == 2 and "--dataset" in err
    assert not (tmp_path / "new").exists()
    blocker = tmp_path / "file"
    blocker.write_text("x")
    rc, _, err = harness_cli("--model", "random", "--output_path", str(blocker / "results"))
    assert rc == 2 and "--output_path" in err and "is a file" in err


def test_third_party_loggers_stay_at_warning_under_debug():
    from harness.api import QUIET_LOGGERS, set_verbosity

    before = {n: logging.getLogger(n).level for n in ("harness", *QUIET_LOGGERS)}
    try:
        set_verbosity("DEBUG")
        assert logging.getLogger("harness").getEffectiveLevel() == logging.DEBUG
        for name in ("matplotlib", "PIL", "urllib3", "filelock"):
            assert logging.getLogger(name).getEffectiveLevel() == logging.WARNING, name
    finally:
        for n, level in before.items():
            logging.getLogger(n).setLevel(level)


def test_trust_remote_code_against_model_args_false_is_named(casu_small):
    model = ["--model", "qwen2-audio", "--model_args", "pretrained=/nowhere,trust_remote_code=false"]
    rc, _, err = harness_cli(*model, "--trust_remote_code", "--dataset", str(casu_small))
    assert rc == 2 and "give one of them" in err


def test_a_checkpoint_of_another_family_is_refused_before_its_weights(casu_small, tmp_path):
    import time

    import tiny_models as tiny

    ckpt = tiny.build_qwen2_audio(tmp_path / "qwen2-audio")
    t0 = time.perf_counter()
    model = ["--model", "qwen2.5-omni", "--model_args", f"pretrained={ckpt}"]
    rc, _, err = harness_cli(
        *model, "--dataset", str(casu_small), "--output_path", str(tmp_path / "out"), "--quiet"
    )
    assert rc == 2, err
    assert "'qwen2_audio' checkpoint (Qwen2AudioForConditionalGeneration)" in err
    assert "qwen2.5-omni loads 'qwen2_5_omni'" in err and "--model qwen2-audio loads it" in err
    assert time.perf_counter() - t0 < 10 and not (tmp_path / "out").exists()


def test_gen_kwargs_take_lmevals_keys_or_name_what_the_adapter_cannot_do(casu_small, tmp_path):
    from harness.config import parse_gen_kwargs

    assert parse_gen_kwargs("until=</s>,max_gen_toks=64") == {"until": ["</s>"], "max_new_tokens": 64}
    argv = ["--tasks", "scene_description", "--gen_kwargs"]
    rc, _, err = _run(casu_small, tmp_path, *argv, "until=.,max_gen_toks=16")
    assert rc == 0, err
    gen = _doc(tmp_path)["generation"]["scene_description"]
    assert gen["until"] == ["."] and gen["max_new_tokens"] == 16
    rc, _, err = _run(casu_small, tmp_path, *argv, "do_sample=true,temperature=0.7,top_k=5")
    assert rc == 2 and "top_k" in err and "random does not pass top_k" in err
    rc, _, err = _run(casu_small, tmp_path, *argv, "top_p=0.9")
    assert rc == 2 and "top_p has no effect without do_sample" in err
    rc, _, err = _run(casu_small, tmp_path, *argv, "beams=4")
    assert rc == 2 and "not a generation setting" in err and "max_gen_toks" in err


def test_wandb_args_log_the_finished_run_offline(casu_small, tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.setenv("WANDB_SILENT", "true")
    rc, _, err = _run(casu_small, tmp_path, "--log_samples", "--wandb_args", "project=casu-test,name=roles")
    assert rc == 0, err
    (run_dir,) = (tmp_path / "wandb").glob("offline-run-*")
    (log,) = run_dir.glob("run-*.wandb")  # the run's record log, what `wandb sync` sends
    assert b"role_inference/PEB/accuracy" in log.read_bytes()  # the summary's metric keys
    tables = {
        p.name.split("_")[0]: json.loads(p.read_text()) for p in run_dir.glob("files/media/table/*.json")
    }
    results, samples = tables["results"], tables["role"]
    doc = _doc(tmp_path)
    row = next(r for r in results["data"] if r[:3] == ["role_inference", "PEB", "accuracy"])
    assert row[3] == doc["results"]["role_inference"]["PEB"]["accuracy"]["value"]
    assert len(samples["data"]) == 8 and "prompt" in samples["columns"]
    rc, _, err = _run(casu_small, tmp_path, "--wandb_args", "project")
    assert rc == 2 and "--wandb_args" in err and len(err.strip().splitlines()) == 1
