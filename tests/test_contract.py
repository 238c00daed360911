"""The builder/harness contract: registry, annotation reader, shared RNG kept bit-compatible."""

import json

import pytest

from casu_dataset import builder_models, contract
from casu_dataset.core.rng import derive_rng


def _draws(rng):
    return rng.integers(0, 2**32, 3).tolist()


def test_rng_streams_are_pinned():
    # Numbers drawn by the pre-contract code (dataset 2.0.0): a change here changes every scene.
    from casu_dataset.mix.mixer import scene_rng
    from harness.run.conditions import noise_rng

    assert _draws(scene_rng(3, "park_01")) == [290725727, 1721567380, 757751983]
    assert _draws(derive_rng(3, "park_01/event:e1", 0x5EED, nbytes=4, byteorder="big")) == [
        2864405823,
        2987071988,
        1763231104,
    ]  # realize: retrieval tie-breaks
    assert _draws(derive_rng(3, "park_01", 0x70CE, nbytes=4, byteorder="big")) == [
        1231582514,
        2700514821,
        2836686789,
    ]  # speech layer: voice assignment
    assert _draws(derive_rng(3, "slt", nbytes=4, byteorder="big")) == [
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
    from casu_dataset.core.hub import PushError, check_repo_id
    from harness.output.hub import plan_push

    assert check_repo_id("casu-org/casu-mini.v2") == "casu-org/casu-mini.v2"
    for bad in ("noslash", "a/b/c", "org/na me", "org/-x", "org/a--b", "/x"):
        with pytest.raises(PushError, match="ORG/NAME"):
            check_repo_id(bad)
    with pytest.raises(PushError, match="--repo 'org/a--b'"):  # the harness's push uses the same check
        plan_push("unused", "org/a--b")


# What harness/ and model_adapters/ may import from casu_dataset: the contract, the reader, the
# builder's models (imported on use) and the shared infrastructure (casu_dataset.core); everything
# else of the builder comes through those.
ALLOWED = {"casu_dataset.contract", "casu_dataset.formats.reader", "casu_dataset.builder_models"}


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
# Modules split out of api.py (Results, the path checks, the config block): the api's stage.
API_PARTS = ("results", "paths", "run_config")
# The flag-value parsers EvalConfig is built from: the config's stage.
CONFIG_PARTS = ("flag_values",)


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
    head = "api" if head in API_PARTS else "config" if head in CONFIG_PARTS else head
    return HARNESS_STAGES.index(head) if head in HARNESS_STAGES else None


def test_harness_imports_flow_one_way_through_its_stages():
    """config -> scoring -> task -> run -> output -> api -> cli: no module reaches a later stage
    (planted: a scoring module importing the runner is caught)."""
    graph = _harness_imports()
    assert {"config", "run.evaluate", "scoring.metrics", "output.tables", "cli.run", "api"} <= set(graph)

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
    assert graph["config"] <= {"flag_values"} and not graph["flag_values"], "config: a leaf every stage reads"


def test_output_writers_import_without_a_cycle():
    """the writer writes lm-eval's view (lmeval); both name a run's folder and checkpoint (files):
    no import between them goes back."""
    graph = _harness_imports()
    assert "output.lmeval" in graph["output.writer"] and "output.writer" not in graph["output.lmeval"]
    assert "output.files" in graph["output.lmeval"]
    assert not {"output.writer", "output.document", "output.lmeval"} & graph["output.files"]


def test_builder_models_are_the_speech_layers_own():
    """The harness's 1 - WER and the cascade's transcriber are the speech layer's own (lazily imported)."""
    from casu_dataset.speech import intelligibility

    assert (
        builder_models.normalize_transcript("Hello, World!")
        == intelligibility.normalize("Hello, World!")
        == "hello world"
    )
    assert builder_models.word_error_rate("the cat sat", "the cat sat down") == pytest.approx(1 / 3)
    from harness.scoring.metrics import one_minus_wer

    assert one_minus_wer('She said "the cat sat".', ["the cat sat"]) == 1.0
    with pytest.raises(ValueError, match="reference is empty"):
        builder_models.word_error_rate("", "x")


# The builder's stages, lowest first, in the order data flows up: a module imports only its own
# stage or lower ones. Every import counts, lazy or under `if TYPE_CHECKING:` alike (a type-only
# import still ties the module to a higher stage's code).
BUILDER_STAGES = [
    "core",  # errors, paths, audio I/O, loudness, seeded streams, atomic writes, LLM backends, Hub
    "contract",  # what a dataset holds: tasks, configs, layer names, the scene annotation
    "formats",  # the files every stage reads: a built dataset (reader, schema, loader), the lock
    "scenarios",  # the shipped libraries (paths only)
    "script",  # scene scripts, their questions and the timing of their layers
    "sounds",  # sound catalogs and retrieval
    "speech",  # voices, TTS and the intelligibility check
    "builder_models",  # the embedder and Whisper behind functions, for the harness
    "mix",  # realization (sources, speech, timeline) and the mixer; the second realization
    "families",  # contrast families: compile, build as one unit, preflight, validity, audit
    "legacy",  # the v1 scene library
    "review",  # the review page and its decisions
    "agents",  # all LLM generation: scene scripts, families, the critic panel
    "dataset",  # the build: parquet folder, card, executors, scene cache
    "api",  # BuildConfig + build()
    "cli",  # the command line
    "__main__",
]


def _builder_stage(module: str) -> int:
    """The stage of a casu_dataset module (KeyError: a package no stage names)."""
    head = module.split(".")[1]
    return BUILDER_STAGES.index(head)


def backward_imports(path, module: str) -> list[str]:
    """`line: module -> imported` for every import of a higher stage's module in `path`."""
    return [
        f"{line}: {module} -> {mod}"
        for line, mod in casu_imports(path)
        if mod != "casu_dataset" and _builder_stage(mod) > _builder_stage(module)
    ]


def test_builder_imports_only_run_down_its_stages(tmp_path):
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    pkg = root / "casu_dataset"
    files = {
        ".".join(p.relative_to(root).with_suffix("").parts): p
        for p in sorted(pkg.rglob("*.py"))
        if p != pkg / "__init__.py"
    }
    assert len(files) > 80
    # every module is in a stage (a new package must be placed in the order)
    unplaced = sorted(m for m in files if m.split(".")[1] not in BUILDER_STAGES)
    assert not unplaced, f"modules in no stage of BUILDER_STAGES: {unplaced}"
    # the package root holds __version__ and lazy names only: importing it from any stage is free
    assert casu_imports(pkg / "__init__.py") == []
    bad = [b for m, p in files.items() for b in backward_imports(p, m)]
    assert not bad, "imports from a lower stage to a higher one:\n" + "\n".join(bad)
    # the check itself: a lazy, a module-level and a type-only import up the stages are caught
    probe = tmp_path / "probe.py"
    probe.write_text(
        "from typing import TYPE_CHECKING\nfrom casu_dataset.core.rng import derive_rng\n"
        "from casu_dataset import contract\nif TYPE_CHECKING:\n    from casu_dataset.mix.mixer import Clip\n"
        "def f():\n    from casu_dataset.formats import reader\n    import casu_dataset.dataset.card\n"
        "from casu_dataset.families.compile import FamilyScene\n"
    )
    assert backward_imports(probe, "casu_dataset.speech.probe") == [
        "5: casu_dataset.speech.probe -> casu_dataset.mix.mixer",
        "8: casu_dataset.speech.probe -> casu_dataset.dataset.card",
        "9: casu_dataset.speech.probe -> casu_dataset.families.compile",
    ]
