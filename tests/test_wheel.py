"""A wheel built from the repository, installed in a fresh venv outside the checkout,
has its tasks and runs the harness. The venv takes its dependencies from the project's .venv (a
.pth line: nothing is downloaded) and never sees the checkout's editable install."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from pydantic import TypeAdapter

from harness.output import lm_eval_schema as S
from harness.output.document import SCHEMA_VERSION

pytestmark = pytest.mark.slow  # building the wheel and its venv takes tens of seconds

ROOT = Path(__file__).resolve().parents[1]
TASKS = [
    "contextual_reasoning",
    "entity_extraction",
    "role_inference",
    "counterfactual_reasoning",
    "scene_description",
]


def _run(cmd, cwd, env=None, timeout=600) -> subprocess.CompletedProcess:
    p = subprocess.run(
        [str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )
    assert p.returncode == 0, f"{cmd}: exit {p.returncode}\n{p.stdout[-2000:]}\n{p.stderr[-3000:]}"
    return p


@pytest.fixture(scope="module")
def wheel_venv(tmp_path_factory) -> tuple[Path, Path, dict]:
    """(python, site-packages, env) of a fresh venv holding only the wheel built from the repo."""
    tmp = tmp_path_factory.mktemp("wheel")
    # Build from a copy of the files git knows (tracked and new, not ignored): the build writes
    # build/ and *.egg-info next to its sources, and a local .venv or dataset must not be packed.
    files = _run(
        ["git", "-C", ROOT, "ls-files", "-z", "--cached", "--others", "--exclude-standard"], ROOT
    ).stdout
    src = tmp / "src"
    for rel in filter(None, files.split("\0")):
        f = ROOT / rel
        if f.is_file():
            (src / rel).parent.mkdir(parents=True, exist_ok=True)
            (src / rel).write_bytes(f.read_bytes())
    _run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            src,
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            tmp / "dist",
        ],
        tmp,
    )
    wheel = next((tmp / "dist").glob("casu-*.whl"))
    venv = tmp / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", venv], tmp)
    py = venv / "bin" / "python"
    site = Path(
        _run([py, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"], tmp).stdout.strip()
    )
    # The project venv's packages, appended after the fresh venv's own: a path line in a .pth does
    # not run that folder's .pth files, so the checkout's editable-install hook stays out.
    (site / "casu_deps.pth").write_text(sysconfig.get_path("purelib") + "\n")
    _run(
        [sys.executable, "-m", "pip", "--python", py, "install", "--no-deps", "--no-index", "-q", wheel], tmp
    )
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    return py, site, env


def test_the_wheel_imports_from_its_own_site_packages(wheel_venv, tmp_path):
    py, site, env = wheel_venv
    code = (
        "import json, casu_dataset, harness, model_adapters; from harness.task.config import "
        "builtin_tasks_dir; print(json.dumps([m.__file__ for m in (casu_dataset, harness, model_adapters)]"
        " + [str(builtin_tasks_dir())]))"
    )
    paths = [Path(p) for p in json.loads(_run([py, "-c", code], tmp_path, env).stdout)]
    for p in paths:
        assert p.is_relative_to(site) and not p.is_relative_to(ROOT), p
    assert sorted(f.name for f in paths[-1].glob("*.yaml")) == sorted(f"{t}.yaml" for t in TASKS)


def test_the_wheel_lists_tasks_and_runs_a_random_evaluation(wheel_venv, casu_small, tmp_path):
    py, site, env = wheel_venv
    p = _run([py, "-m", "harness", "--tasks", "list"], tmp_path, env)
    listed = [line.split()[0] for line in p.stdout.split("groups")[0].splitlines()[1:] if line.strip()]
    assert sorted(listed) == sorted(TASKS)
    out = tmp_path / "res"
    p = _run(
        [
            py,
            "-m",
            "harness",
            "--model",
            "random",
            "--tasks",
            "all",
            "--dataset",
            casu_small,
            "--output_path",
            out,
            "--quiet",
            "--cache",
            "off",
        ],
        tmp_path,
        env,
    )
    rows = sum(pq.read_metadata(f).num_rows for t in TASKS for f in (casu_small / t).glob("*.parquet"))
    assert rows == 28 and f"evaluated {rows} requests over {rows} samples from {casu_small}" in p.stdout
    doc = json.loads(next((out / "random").glob("casu_results_*.json")).read_text())
    assert (
        doc["schema_version"] == SCHEMA_VERSION
        and doc["status"] == "ok"
        and doc["evaluated"]["requests"] == rows
    )
    assert sorted(doc["results"]) == sorted(TASKS)
    assert sum(c["PEB"]["n"] for c in doc["results"].values()) == rows
    assert doc["results"]["role_inference"]["PEB"]["family_accuracy"]["families"] == 2
    lm = json.loads(next((out / "random").glob("results_*.json")).read_text())
    TypeAdapter(S.EvalResults).validate_python(lm, strict=True)  # lm-eval's own output schema
    assert sorted(lm["results"]) == sorted(TASKS)
