"""CASU's tasks exported for lmms-eval / lm-eval (`python -m harness export-tasks`) and the replay
adapter, checked without the peer packages: the folder is written and parses, its hooks decode the
audio to 16 kHz mono float32, give CASU's prompt and score a reply as CASU's harness does, sample by
sample and in aggregate (the real peers: tests/test_peers_compare.py)."""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import numpy as np
import pytest
import yaml
from conftest import harness_cli, tiny_dataset

TASKS = [
    "contextual_reasoning",
    "entity_extraction",
    "role_inference",
    "counterfactual_reasoning",
    "scene_description",
]


class _Tagged(yaml.SafeLoader):
    """A YAML loader that reads `!function utils.x` as {"!function": "utils.x"}."""


_Tagged.add_constructor("!function", lambda loader, node: {"!function": loader.construct_scalar(node)})


def _load_yaml(p: Path) -> dict:
    return yaml.load(p.read_text(), Loader=_Tagged)


def _utils(folder: Path):
    spec = importlib.util.spec_from_file_location(f"casu_utils_{folder.name}", folder / "utils.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def exported(casu_small, tmp_path_factory):
    d = tmp_path_factory.mktemp("peers")
    out = {}
    for peer in ("lmms-eval", "lm-eval"):
        rc, so, se = harness_cli("export-tasks", peer, str(d / peer), "--dataset", str(casu_small))
        assert rc == 0, se
        assert "wrote 8 files" in so and "--include_path" in so
        out[peer] = d / peer
    return out


def _docs(casu_small: Path, task: str) -> list[dict]:
    """The rows as the peers read them: `datasets` over the folder's parquet files."""
    import datasets

    from casu_dataset.formats.reader import BuiltDataset

    files = [str(p) for p in BuiltDataset(casu_small).files(task)]
    return list(datasets.load_dataset("parquet", data_files={"test": files}, split="test"))


@pytest.mark.parametrize("peer", ["lmms-eval", "lm-eval"])
def test_exported_folder_parses_and_points_at_the_data(exported, casu_small, peer):
    from casu_dataset.formats.reader import BuiltDataset

    folder = exported[peer]
    assert sorted(p.name for p in folder.iterdir()) == sorted(
        [f"{t}.yaml" for t in TASKS] + ["casu.yaml", "utils.py", "README.md"]
    )
    group = _load_yaml(folder / "casu.yaml")
    assert group == {"group": "casu", "task": TASKS}
    utils = _utils(folder)
    for t in TASKS:
        cfg = _load_yaml(folder / f"{t}.yaml")
        assert cfg["task"] == t and cfg["output_type"] == "generate_until" and cfg["test_split"] == "test"
        assert cfg["dataset_path"] == "parquet"
        files = cfg["dataset_kwargs"]["data_files"]["test"]
        assert files == [str(p) for p in BuiltDataset(casu_small.resolve()).files(t)]
        assert all(Path(f).is_absolute() and Path(f).is_file() for f in files)
        hooks = [v["!function"] for v in cfg.values() if isinstance(v, dict) and "!function" in v]
        hooks += [
            m["aggregation"]["!function"] for m in cfg["metric_list"] if isinstance(m["aggregation"], dict)
        ]
        assert hooks and all(h.startswith("utils.") and callable(getattr(utils, h[6:])) for h in hooks)
        gen = cfg["generation_kwargs"]
        assert gen["until"] == [] and gen["do_sample"] is False and gen["temperature"] == 0.0
        assert gen["max_new_tokens" if peer == "lmms-eval" else "max_gen_toks"] == (
            160 if t == "scene_description" else 32
        )
        names = [m["metric"] for m in cfg["metric_list"]]
        if t == "scene_description":
            assert names == ["bleu", "bertscore", "event_match", "one_minus_wer"]
        elif peer == "lmms-eval":
            assert names == ["acc", "family_acc", "unparsed_rate"]
            assert cfg["cluster_key"] == "family_id" and cfg["score_key"] == "score"
        else:
            assert names == ["acc", "family_acc", "acc_stderr_clustered", "unparsed_rate"]
    # utils.py only imports CASU's hooks: no logic of its own
    body = (folder / "utils.py").read_text()
    assert "def " not in body and "from harness.peers import" in body


def test_hub_id_exports_dataset_path_and_name(tmp_path):
    from harness.cli.export_tasks import export_tasks

    export_tasks("lm-eval", tmp_path / "lm", "org/casu-mini")
    cfg = _load_yaml(tmp_path / "lm" / "role_inference.yaml")
    assert cfg["dataset_path"] == "org/casu-mini" and cfg["dataset_name"] == "role_inference"
    assert "dataset_kwargs" not in cfg


def test_export_refuses_a_missing_or_broken_dataset(tmp_path, casu_small):
    import shutil

    rc, _, se = harness_cli(
        "export-tasks", "lmms-eval", str(tmp_path / "x"), "--dataset", str(tmp_path / "nope")
    )
    assert rc == 2 and se.count("\n") == 1 and "--dataset" in se and "nope" in se
    assert not (tmp_path / "x").exists()
    broken = tmp_path / "broken"
    shutil.copytree(casu_small, broken)
    (broken / "role_inference" / "stray.parquet").write_bytes(b"x")  # not in the build record
    rc, _, se = harness_cli("export-tasks", "lm-eval", str(tmp_path / "y"), "--dataset", str(broken))
    assert rc == 2 and "--dataset" in se and "stray" in se
    rc, _, se = harness_cli("export-tasks", "other", str(tmp_path / "z"), "--dataset", str(casu_small))
    assert rc == 2 and "other" in se


def test_empty_configs_are_left_out_and_named(tmp_path):
    """datasets cannot read an empty parquet file, and one task failing to load fails the group."""
    ds = tiny_dataset(tmp_path / "tiny", 3, "t")  # role_inference only
    out = tmp_path / "lm"
    (out).mkdir()
    (out / "entity_extraction.yaml").write_text("# Written by an earlier export\ntask: entity_extraction\n")
    rc, so, se = harness_cli("export-tasks", "lm-eval", str(out), "--dataset", str(ds))
    assert rc == 0, se
    assert sorted(p.name for p in out.glob("*.yaml")) == ["casu.yaml", "role_inference.yaml"]
    assert _load_yaml(out / "casu.yaml")["task"] == ["role_inference"]
    for t in ("contextual_reasoning", "entity_extraction", "counterfactual_reasoning", "scene_description"):
        assert f"config {t!r} has no rows" in se
    empty = tiny_dataset(tmp_path / "empty", 0, "e")
    rc, _, se = harness_cli("export-tasks", "lmms-eval", str(tmp_path / "x"), "--dataset", str(empty))
    assert rc == 2 and "every task's config is empty" in se


@pytest.mark.parametrize("peer", ["lmms-eval", "lm-eval"])
def test_hooks_decode_audio_and_give_casus_prompt(exported, casu_small, peer):
    from casu_dataset.formats.reader import BuiltDataset
    from harness.task.config import builtin_tasks_dir, load_task
    from harness.task.prompts import task_prompt

    utils = _utils(exported[peer])
    for t in TASKS:
        task = load_task(builtin_tasks_dir() / f"{t}.yaml")
        rows = {r.id: r for r in BuiltDataset(casu_small).rows(t)}
        docs = _docs(casu_small, t)
        assert len(docs) == len(rows) > 0
        for doc in docs:
            row = rows[doc["id"]]
            audio = utils.doc_to_visual(doc) if peer == "lmms-eval" else utils.doc_to_audio(doc)
            assert len(audio) == 1
            a = audio[0]
            assert a["sampling_rate"] == 16000 and a["array"].dtype == np.float32 and a["array"].ndim == 1
            np.testing.assert_array_equal(a["array"], row.waveform)  # what CASU's harness decodes
            want = task_prompt(task, row, list(row.options))  # CASU's own request prompt
            text = getattr(utils, f"{t}_doc_to_text")(doc)
            assert text == (want if peer == "lmms-eval" else "<audio>" + want)


def test_hooks_score_replies_as_the_harness_does(exported, casu_small, tmp_path):
    """The replay adapter through CASU's harness, and the exported hooks over the same replies:
    the same parsed letter, parse method and correctness per row, the same aggregates."""
    replies = [
        "B",
        "Answer: C",
        "(a) x",
        "I think B.",
        "",
        "A or B",
        "**D**",
        "none of them",
        "The answer is A",
    ]
    lines, by_task = [], {}
    for t in TASKS:
        for i, doc in enumerate(_docs(casu_small, t)):
            if t == "scene_description":
                r = [
                    doc["reference"],
                    doc["reference"][:30] + "  ",
                    "",
                    f'He says "{(doc["turns"] or ["x"])[0]}"',
                ][i % 4]
            else:
                r = replies[i % len(replies)] if i % 3 else doc["options"][ord(doc["answer"]) - 65]
            lines.append({"id": doc["id"], "task": t, "response": r})
            by_task.setdefault(t, []).append((doc, r))
    resp = tmp_path / "replies.jsonl"
    resp.write_text("".join(json.dumps(x) + "\n" for x in lines))
    rc, _, se = harness_cli(
        "--model", "replay", "--model_args", f"responses={resp}", "--tasks", "all",
        "--dataset", str(casu_small), "--output_path", str(tmp_path / "out"), "--log_samples", "--quiet",
    )  # fmt: skip
    assert rc == 0, se
    run = tmp_path / "out" / "replay"
    res = json.loads(next(run.glob("casu_results_*.json")).read_text())
    assert res["audio_probe"]["status"] == "skipped"  # the replay adapter says it ignores the audio
    for peer in ("lmms-eval", "lm-eval"):
        utils = _utils(exported[peer])
        for t, pairs in by_task.items():
            casu = {
                s["id"]: s
                for s in map(json.loads, next(run.glob(f"casu_samples_{t}_*.jsonl")).read_text().splitlines())
            }
            out = [getattr(utils, f"{t}_process_results")(doc, [r]) for doc, r in pairs]
            want = res["results"][t]["PEB"]
            if t == "scene_description":
                items = [o["bleu"] for o in out]
                assert [i["response"] for i in items] == [casu[d["id"]]["response"] for d, _ in pairs]
                for name in ("bleu4", "bertscore", "one_minus_wer", "event_match"):
                    assert math.isclose(getattr(utils, name)(items), want[name]["value"], rel_tol=1e-12), name
                continue
            items = [o["family_acc"] for o in out]
            for (doc, r), it in zip(pairs, items):
                c = casu[doc["id"]]
                assert (it["parsed"], it["method"], it["correct"]) == (
                    c["parsed"],
                    c["method"],
                    c["correct"],
                ), r
            acc = [o["acc"] for o in out]
            if peer == "lm-eval":
                assert float(np.mean(acc)) == pytest.approx(want["accuracy"]["value"], abs=1e-12)
                se_ = utils.accuracy_stderr_clustered(items)
                assert se_ > 0 or want["accuracy"]["value"] in (0.0, 1.0)
            else:
                assert utils.accuracy(acc) == pytest.approx(want["accuracy"]["value"], abs=1e-12)
            assert utils.family_accuracy(items) == want["family_accuracy"]["value"]
            assert utils.unparsed_rate(items) == pytest.approx(want["unparsed_rate"]["value"], abs=1e-12)
    assert any(res["results"][t]["PEB"]["unparsed_rate"]["value"] > 0 for t in TASKS[:4]), (
        "the replies include unparseable ones"
    )


def test_clustered_standard_error():
    from harness.peers.common import clustered_stderr

    # two families of two, perfectly correlated within: the iid variance plus the cross terms
    assert clustered_stderr([1, 1, 0, 0], ["a", "a", "b", "b"]) == pytest.approx(math.sqrt(1 / 12 + 1 / 16))
    x = [1, 0, 1, 1, 0, 0, 1]
    iid = float(np.std(x, ddof=1) / math.sqrt(len(x)))
    assert clustered_stderr(x, list("abcdefg")) == pytest.approx(iid)  # every sample its own cluster
    assert clustered_stderr(x, [None] * 7) == pytest.approx(iid)
    assert math.isnan(clustered_stderr([1], ["a"]))


def _run_replay(ds, out, responses, extra_args=""):
    return harness_cli(
        "--model", "replay", "--model_args", f"responses={responses}{extra_args}",
        "--tasks", "role_inference",
        "--dataset", str(ds), "--output_path", str(out), "--quiet",
    )  # fmt: skip


def test_replay_missing_id_and_bad_files_are_one_clear_error(casu_small, tmp_path):
    from casu_dataset.formats.reader import BuiltDataset

    ids = [r.id for r in BuiltDataset(casu_small).rows("role_inference")]
    f = tmp_path / "r.jsonl"
    f.write_text("".join(json.dumps({"id": i, "response": "A"}) + "\n" for i in ids[1:]))
    rc, _, se = _run_replay(casu_small, tmp_path / "o1", f)
    assert rc == 2 and str(f) in se and repr(ids[0]) in se and "no response for id" in se
    for text, msg in (
        ('{"id": "x", "response": "A"}\nnot json\n', ":2: not a JSON object"),
        ('{"id": "x", "response": 3}\n', "field 'response' of id 'x' must be a string"),
        ('{"id": "x", "response": "A"}\n{"id": "x", "response": "B"}\n', ":2: id 'x' is given twice"),
        ('{"response": "A"}\n', ":1: field 'id' must be a non-empty string"),
        ("\n", "no responses in it"),
    ):
        f.write_text(text)
        rc, _, se = _run_replay(casu_small, tmp_path / "o2", f)
        assert rc == 2 and msg in se and se.count("\n") == 1, (text, se)
    rc, _, se = _run_replay(casu_small, tmp_path / "o3", tmp_path / "absent.jsonl")
    assert rc == 2 and "absent.jsonl" in se and "cannot read it" in se
    # a line recorded for another task is refused, not replayed
    f.write_text(
        "".join(json.dumps({"id": i, "task": "entity_extraction", "response": "A"}) + "\n" for i in ids)
    )
    rc, _, se = _run_replay(casu_small, tmp_path / "o4", f)
    assert rc == 2 and "recorded for task 'entity_extraction'" in se


def test_replay_cache_follows_the_file_content(casu_small, tmp_path):
    """The same path with other replies is another model: never served from the cache."""
    from casu_dataset.formats.reader import BuiltDataset

    rows = BuiltDataset(casu_small).rows("role_inference")
    f = tmp_path / "r.jsonl"
    accs = []
    for mode in ("key", "wrong"):
        f.write_text(
            "".join(
                json.dumps(
                    {"id": r.id, "response": r.answer if mode == "key" else "ABCD"[(r.key_index + 1) % 4]}
                )
                + "\n"
                for r in rows
            )
        )
        rc, _, se = _run_replay(casu_small, tmp_path / "out", f)
        assert rc == 0, se
        (res,) = sorted((tmp_path / "out" / "replay").glob("casu_results_*.json"))[-1:]
        accs.append(json.loads(res.read_text())["results"]["role_inference"]["PEB"]["accuracy"]["value"])
    assert accs == [1.0, 0.0]


def test_replay_with_audio_checks_what_the_harness_prepares(casu_small, tmp_path):
    from casu_dataset.formats.reader import BuiltDataset

    f = tmp_path / "r.jsonl"
    f.write_text(
        "".join(
            json.dumps({"id": r.id, "response": "B"}) + "\n"
            for r in BuiltDataset(casu_small).rows("role_inference")
        )
    )
    rc, _, se = _run_replay(casu_small, tmp_path / "out", f, ",audio=true")
    assert rc == 0, se
    res = json.loads(next((tmp_path / "out" / "replay").glob("casu_results_*.json")).read_text())
    assert res["n_errors"] == 0  # every request's audio was mono float32 at 16 kHz
    # the probe runs, and sees what is true: the replies do not change with the audio
    assert res["audio_probe"]["status"] == "unchanged"


def test_hooks_name_the_row_and_field_of_a_bad_doc():
    from harness.peers import common, lm_eval_tasks, lmms_eval_tasks

    with pytest.raises(common.PeerTaskError, match=r"row 'r1': column 'audio' has no FLAC bytes"):
        lmms_eval_tasks.doc_to_visual({"id": "r1", "audio": {"bytes": None, "path": "x.flac"}})
    with pytest.raises(common.PeerTaskError, match=r"row 'r2': no 'audio' column"):
        lm_eval_tasks.doc_to_audio({"id": "r2"})
    with pytest.raises(Exception, match=r"row 'r3' audio: undecodable audio bytes"):
        lm_eval_tasks.doc_to_audio({"id": "r3", "audio": {"bytes": b"not flac", "path": None}})
    with pytest.raises(common.PeerTaskError, match=r"role_inference row 'r4': no 'options' column"):
        lmms_eval_tasks.process_results_for("role_inference")({"id": "r4", "answer": "A"}, ["A"])
    with pytest.raises(common.PeerTaskError, match="unknown CASU task 'nope'"):
        lm_eval_tasks.doc_to_text_for("nope")
