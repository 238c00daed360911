"""The builder/harness contract: registry, annotation reader, shared RNG kept bit-compatible."""

import json

import pytest

from casu_dataset import contract


def _draws(rng):
    return rng.integers(0, 2**32, 3).tolist()


def test_rng_streams_are_pinned():
    # Numbers drawn by the pre-contract code (dataset 2.0.0): a change here changes every scene.
    from casu_dataset.mix.mixer import scene_rng
    from harness.run.conditions import noise_rng

    assert _draws(scene_rng(3, "park_01")) == [290725727, 1721567380, 757751983]
    assert _draws(contract.derive_rng(3, "park_01/event:e1", 0x5EED, nbytes=4, byteorder="big")) == [
        2864405823,
        2987071988,
        1763231104,
    ]  # realize: retrieval tie-breaks
    assert _draws(contract.derive_rng(3, "park_01", 0x70CE, nbytes=4, byteorder="big")) == [
        1231582514,
        2700514821,
        2836686789,
    ]  # speech layer: voice assignment
    assert _draws(contract.derive_rng(3, "slt", nbytes=4, byteorder="big")) == [
        129784894,
        2504085850,
        3349034858,
    ]  # voices.derive
    assert _draws(noise_rng(3, "park_01", "speech")) == [1415553754, 3403064759, 2226942706]  # masking noise
    from model_adapters.base import Request
    from model_adapters.baselines import RandomBaseline

    req = Request(prompt="q?", options=list("abcd"), id="x1")
    assert _draws(RandomBaseline(seed=3)._rng(req)) == [3662840721, 714283228, 238454932]  # random baseline
    with pytest.raises(
        ValueError, match="Request.kind 'scene_description'"
    ):  # adapters get a kind, not a task
        Request(prompt="x", kind="scene_description")


def test_registry_drives_configs():
    assert contract.mcq_tasks() == (
        "contextual_reasoning",
        "entity_extraction",
        "role_inference",
        "counterfactual_reasoning",
    )
    assert contract.dataset_configs()[0] == "scenes" and contract.dataset_configs()[-1] == "scene_description"
    assert contract.get_task("role_inference").short == "Role"
    with pytest.raises(contract.UnknownTaskError, match="unknown task 'nope'"):
        contract.get_task("nope")
    with pytest.raises(ValueError, match="already registered"):
        contract.register_task(contract.TaskSpec("role_inference", "R", "open", "x"))
    assert contract.FULL_CONDITION == "PEB"


def _ann(**kw):
    a = {
        "format": contract.ANNOTATION_FORMAT,
        "version": 1,
        "scene_id": "s",
        "sample_rate": 10,
        "num_samples": 100,
        "script": {"events": [{"window": 3.0}, {}]},
        "plan": {
            "turns": [{"onset": 0.0, "offset": 2.0}, {"onset": 1.5, "offset": 3.0}],
            "events": [{"onset": 5.0, "offset": 6.0}, {"onset": 9.5, "offset": 12.0}],
            "rng_key": "fam",
            "turn_reserve": [2.0, 4.0],
        },
    }
    a.update(kw)
    return a


def test_annotation_reader_spans_and_version():
    a = contract.SceneAnnotation.parse(json.dumps(_ann()))
    assert a.active_spans("speech") == [(0, 30)]
    assert a.active_spans("speech", reserved=True) == [(0, 55)]
    assert a.active_spans("events") == [(50, 60), (95, 100)]
    assert a.active_spans("events", reserved=True) == [(50, 80), (95, 100)]
    assert a.active_spans("background") == [(0, 100)] and a.family_key == "fam"
    with pytest.raises(contract.AnnotationError, match="version 9 is not supported"):
        contract.SceneAnnotation.parse(_ann(version=9), "scene x")
    with pytest.raises(contract.AnnotationError, match="format"):
        contract.SceneAnnotation.parse(_ann(format="other"))
    with pytest.raises(contract.AnnotationError, match="missing or bad field"):
        contract.SceneAnnotation.parse(_ann(plan={}))


def test_one_repo_id_check_for_dataset_and_results_push():
    from casu_dataset.core.hub import HubError, check_repo_id
    from harness.output.hub import PushError, plan_push

    assert check_repo_id("casu-org/casu-mini.v2") == "casu-org/casu-mini.v2"
    for bad in ("noslash", "a/b/c", "org/na me", "org/-x", "org/a--b", "/x"):
        with pytest.raises(HubError, match="ORG/NAME"):
            check_repo_id(bad)
    with pytest.raises(PushError, match="--repo 'org/a--b'"):  # the harness's push uses the same check
        plan_push("unused", "org/a--b")


# What harness/ and model_adapters/ may import from casu_dataset: the contract, the reader and the
# shared infrastructure (casu_dataset.core); everything else of the builder comes through the contract.
ALLOWED = {"casu_dataset.contract", "casu_dataset.dataset.reader"}


def _allowed(module: str) -> bool:
    return module in ALLOWED or module == "casu_dataset.core" or module.startswith("casu_dataset.core.")


def _module_of(package: str, name: str) -> str:
    """`from PACKAGE import NAME` imports the module PACKAGE.NAME when there is one, else PACKAGE."""
    from pathlib import Path

    base = Path(__file__).resolve().parents[1] / f"{package}.{name}".replace(".", "/")
    return f"{package}.{name}" if base.with_suffix(".py").is_file() or base.is_dir() else package


def casu_imports(path):
    """(line, module) of every import of a casu_dataset module in a file, at any depth (a lazy
    import inside a function counts): `from casu_dataset import x` imports casu_dataset.x."""
    import ast

    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names if a.name.split(".")[0] == "casu_dataset"]
        elif (
            isinstance(node, ast.ImportFrom)
            and node.level == 0
            and node.module
            and node.module.split(".")[0] == "casu_dataset"
        ):
            out += [(node.lineno, _module_of(node.module, a.name)) for a in node.names]
    return sorted(out)


def test_harness_imports_only_the_contract(tmp_path):
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    files = sorted(p for d in ("harness", "model_adapters") for p in (root / d).rglob("*.py"))
    assert len(files) > 20
    bad = [
        f"{f.relative_to(root)}:{line}: {mod}"
        for f in files
        for line, mod in casu_imports(f)
        if not _allowed(mod)
    ]
    assert not bad, "imports of casu_dataset outside the contract:\n" + "\n".join(bad)
    # the check itself: each form of import it must catch is caught, with its line
    probe = tmp_path / "probe.py"
    probe.write_text(
        "import casu_dataset.dataset.card\nfrom casu_dataset.sounds import retrieval\nfrom casu_dataset.core "
        "import hub\ndef f():\n    from casu_dataset.speech.intelligibility import wer\n"
        "from casu_dataset.core.llm.cache import ResponseCache\nimport casu_dataset\n"
    )
    assert [(n, m) for n, m in casu_imports(probe) if not _allowed(m)] == [
        (1, "casu_dataset.dataset.card"),
        (2, "casu_dataset.sounds.retrieval"),
        (5, "casu_dataset.speech.intelligibility"),
        (7, "casu_dataset"),
    ]


# The harness's stages, in the order data flows: a module imports only its own stage or earlier ones.
HARNESS_STAGES = ["config", "scoring", "task", "run", "output", "api", "peers", "cli"]


def _harness_imports() -> dict[str, set[str]]:
    """harness module (dotted, without `harness.`) -> the harness modules it imports, lazily or not."""
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parents[1] / "harness"
    out = {}
    for f in root.rglob("*.py"):
        name = ".".join(f.relative_to(root).with_suffix("").parts)
        tree = ast.parse(f.read_text())
        found = set()
        for n in ast.walk(tree):
            if isinstance(n, ast.ImportFrom) and n.module and n.module.startswith("harness."):
                found.add(n.module.removeprefix("harness."))
            elif isinstance(n, ast.ImportFrom) and n.module == "harness":
                found.update(a.name for a in n.names)
        out[name] = found
    return out


def _stage(module: str) -> int | None:
    head = module.split(".")[0]
    return HARNESS_STAGES.index(head) if head in HARNESS_STAGES else None


def test_harness_imports_flow_one_way_through_its_stages():
    """config -> scoring -> task -> run -> output -> api -> cli: no module reaches a later stage
    (planted: a scoring module importing the runner is caught)."""
    graph = _harness_imports()
    assert {"config", "run.evaluate", "scoring.metrics", "output.results", "cli.run", "api"} <= set(graph)

    def backwards(g):
        return sorted(
            (m, i)
            for m, deps in g.items()
            for i in deps
            if _stage(m) is not None and _stage(i) is not None and _stage(i) > _stage(m)
        )

    assert backwards(graph) == []
    planted = dict(graph, **{"scoring.metrics": graph["scoring.metrics"] | {"run.runner"}})
    assert backwards(planted) == [("scoring.metrics", "run.runner")]
    assert not graph["config"], "config is a leaf: every stage reads it"


def test_output_writers_import_without_a_cycle():
    """results writes lm-eval's view (lmeval); both name a run's folder and checkpoint (files):
    no import between them goes back."""
    graph = _harness_imports()
    assert "output.lmeval" in graph["output.results"] and "output.results" not in graph["output.lmeval"]
    assert "output.files" in graph["output.lmeval"]
    assert not {"output.results", "output.lmeval"} & graph["output.files"]


def test_builder_models_come_through_the_contract():
    """The harness's 1 - WER and the cascade's transcriber are the speech layer's own (lazily imported)."""
    from casu_dataset.speech import intelligibility

    assert (
        contract.normalize_transcript("Hello, World!")
        == intelligibility.normalize("Hello, World!")
        == "hello world"
    )
    assert contract.word_error_rate("the cat sat", "the cat sat down") == pytest.approx(1 / 3)
    from harness.scoring.metrics import one_minus_wer

    assert one_minus_wer('She said "the cat sat".', ["the cat sat"]) == 1.0
    with pytest.raises(ValueError, match="reference is empty"):
        contract.word_error_rate("", "x")
