"""Shared infrastructure: one cache layout, one temp-file rule, one content key, no
import cycles, library messages through logging."""

from __future__ import annotations

import ast
import fnmatch
import graphlib
import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from casu_dataset.core import atomic, cache_layout
from casu_dataset.core.content_key import content_key
from casu_dataset.core.llm.cache import ResponseCache
from casu_dataset.dataset.scene_cache import clean_scene_cache
from casu_dataset.dataset.writer import FolderWriter, clean_folder_temps
from casu_dataset.formats import build_manifest
from casu_dataset.sounds.catalog import Catalog
from casu_dataset.sounds.retrieval import catalog_embeddings
from casu_dataset.speech.layer import clean_speech_cache

ROOT = Path(__file__).resolve().parents[1]


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


# -- 1. one cache root ------------------------------------------------------------------------


class _ZeroEmbedder:
    """Stands in for the sentence model: this test is about where the cache file goes."""

    model_name = "zero-test"

    def encode(self, texts, batch_size=128):
        return np.zeros((len(texts), 4), dtype=np.float32)


@pytest.mark.parametrize("env", ["", None])
def test_an_empty_or_unset_casu_cache_is_the_default_and_nothing_lands_in_the_current_folder(
    env, tmp_path, monkeypatch
):
    home, cwd = tmp_path / "home", tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.setenv("HOME", str(home))
    if env is None:
        monkeypatch.delenv("CASU_CACHE", raising=False)
    else:
        monkeypatch.setenv("CASU_CACHE", env)
    monkeypatch.chdir(cwd)
    root = home / ".cache" / "casu"
    assert cache_layout.cache_root() == root
    assert cache_layout.build_dir() == root / "build" and cache_layout.speech_dir() == root / "speech"
    assert cache_layout.embeddings_dir() == root / "embeddings"
    assert cache_layout.cache_root(tmp_path / "flag") == tmp_path / "flag"  # --cache wins
    catalog_embeddings(Catalog.embedded(), _ZeroEmbedder())  # never into ./embeddings
    assert list(cwd.iterdir()) == []
    assert len(list((root / "embeddings").glob("casu-embedded-bank-*.npz"))) == 1


def test_casu_cache_moves_every_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("CASU_CACHE", str(tmp_path))
    assert cache_layout.source_checks_dir() == tmp_path / "source_checks"
    assert cache_layout.llm_responses_file() == tmp_path / "llm_responses.sqlite"
    assert cache_layout.parsed_yaml_dir() == tmp_path / "parsed_yaml"
    assert cache_layout.scenes_dir(cache_layout.build_dir()) == tmp_path / "build" / "scenes"


# -- 2. one temp name, one clean-up rule -------------------------------------------------------


def test_every_temp_has_one_name_and_a_dead_writers_temp_goes(tmp_path):
    mine = atomic.tmp_path(tmp_path / "a.json")
    assert mine.name == f".a.json.tmp-{atomic.HOST}-{os.getpid()}"
    assert atomic.tmp_owner(mine) == (atomic.HOST, os.getpid())
    dead = tmp_path / f".b.json.tmp-{atomic.HOST}-{_dead_pid()}"
    foreign = tmp_path / ".c.json.tmp-other-host.example-1"  # another machine: judged by age only
    old_foreign = tmp_path / ".d.json.tmp-other-host.example-1"
    plain = tmp_path / ".e.json.tmp"  # not a temp name: never touched
    for p in (mine, dead, foreign, old_foreign, plain):
        p.write_text("x")
    os.utime(old_foreign, (0, 0))
    assert sorted(atomic.clean_stale(tmp_path.iterdir())) == sorted([dead, old_foreign])
    assert mine.exists() and foreign.exists() and plain.exists()
    assert all(fnmatch.fnmatch(p.name, atomic.TMP_GLOB) for p in (mine, dead, foreign))


def test_killed_writers_temps_are_cleaned_in_every_cache_and_beside_a_build(tmp_path):
    pid = _dead_pid()
    scene = tmp_path / "build" / "scenes" / f".{'0' * 32}.tmp-{atomic.HOST}-{pid}"
    turn = tmp_path / "speech" / "ab" / f".{'ab' * 32}.wav.tmp-{atomic.HOST}-{pid}"
    out = tmp_path / "casu_mini"
    stage = out.with_name(f".casu_mini.tmp-{atomic.HOST}-{pid}")
    old = out.with_name(f".casu_mini.old.tmp-{atomic.HOST}-{pid}")
    other_build = out.with_name(f".casu_mini_v3.tmp-{atomic.HOST}-{pid}")  # not this output's
    for d in (scene, stage, old, other_build):
        d.mkdir(parents=True)
    turn.parent.mkdir(parents=True)
    turn.write_bytes(b"RIFF")
    assert clean_scene_cache(tmp_path / "build") == [scene]
    assert clean_speech_cache(tmp_path / "speech") == [turn]
    assert sorted(clean_folder_temps(out)) == sorted([stage, old]) and other_build.exists()


def test_a_build_stages_beside_its_output_under_a_name_git_ignores(tmp_path):
    w = FolderWriter(tmp_path / "casu_mini")
    assert w.stage == atomic.tmp_path(tmp_path / "casu_mini") and w.stage.parent == tmp_path
    ignored = [ln for ln in (ROOT / ".gitignore").read_text().splitlines() if ln and not ln.startswith("#")]
    assert any(fnmatch.fnmatch(w.stage.name, pat) for pat in ignored)


# -- 3. one content key, with pinned values ----------------------------------------------------

# Pinned values, on a lock entry and a real voice: the keys of caches users have on disk and of
# the build record must not move.
PIPER_JOE = {
    "id": "piper-joe",
    "engine": "piper",
    "base": "joe",
    "gender": "male",
    "accent": "us",
    "age": "adult",
    "pitch_st": 0.0,
    "tempo": 1.0,
    "seed": None,
}


def test_content_keys_keep_the_values_caches_and_records_were_made_with():
    # a real lock entry as the 2.2 lock held it (frozen: the shipped lock changes with the library)
    entry = json.loads((ROOT / "tests" / "fixtures" / "lock_entry_2_2.json").read_text())
    # scene_cache.build_locked_scene's key
    assert (
        content_key(["locked", 1, "2.0.0", "0123456789abcdef", entry, [PIPER_JOE]], 32)
        == "6193ae19775f745a0c0e4356b63cd1ea"
    )
    # speech.layer's turn key
    text = "Right, let's see it. Show me what you've been practising."
    assert (
        content_key([2, text, PIPER_JOE, "flite-2.2"])
        == "07e4367689e79a78323f6f1a6fc338a10625452d093faf4d97a8bb975c743ed4"
    )
    # the response cache's key, on a prompt with non-ASCII text (kept as is: ensure_ascii=False)
    msgs = [
        {"role": "user", "content": "Which sound follows the café’s door chime — the kettle or the bell?"}
    ]
    assert (
        ResponseCache.key("openai:gpt-x", msgs, None, 64, 0.0)
        == "ed1413860c484e27fa7a5d5a78e7ff5f447b705732ed0b99aee629bcbf6816aa"
    )
    # the build record's identity hash
    ident = build_manifest.identity(
        {"sha256": "9618a4b48df89fd761b10cc07637c0d0d03f9aaf846a22ee3f642e2f9293677b"},
        {
            "contextual_reasoning": "90b8bc4be1e8ae9e69e35b09dd07619e9ddeaf95bc61e0f965482607bece8a44",
            "role_inference": "63cf130aae65420e3f03afb797d8b25601121d07dff49ff4e9229566a0e08705",
        },
    )
    assert ident["sha256"] == "2e90ba2c1e11e744813c3384686c8f319e5b7c754ab40a2306542ea4940ebe96"


def test_a_value_that_is_not_json_is_refused_not_stringified():
    with pytest.raises(TypeError):
        content_key([Path("a")])
    assert content_key({"b": 1, "a": [1.5, "é"]}) == content_key({"a": [1.5, "é"], "b": 1})
    assert content_key(["é"]) != content_key(["é"], ensure_ascii=False)


# -- 4. no import cycles ------------------------------------------------------------------------

PACKAGES = ("casu_dataset", "harness", "model_adapters")


def _modules() -> dict[str, Path]:
    mods = {}
    for pkg in PACKAGES:
        for p in (ROOT / pkg).rglob("*.py"):
            parts = list(p.relative_to(ROOT).with_suffix("").parts)
            mods[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = p
    return mods


def _is_type_checking(node: ast.AST) -> bool:
    t = getattr(node, "test", None)
    return isinstance(node, ast.If) and "TYPE_CHECKING" in (getattr(t, "id", None), getattr(t, "attr", None))


def import_graph(type_only: bool = False) -> dict[str, set[str]]:
    """Module -> the project modules it imports. The rule: every import statement counts,
    at module level or inside a function or class (a lazy import is still a dependency: the
    function cannot run without the other module), except under `if TYPE_CHECKING:` (never
    executed) unless `type_only` (a reader still follows it). `from pkg import name` is an edge
    to `pkg.name` when that is a module, else to `pkg`."""
    mods = _modules()
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for mod, path in mods.items():
        package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        stack = [ast.parse(path.read_text(), str(path))]
        while stack:
            node = stack.pop()
            for child in ast.iter_child_nodes(node):
                if _is_type_checking(child) and not type_only:
                    continue
                stack.append(child)
                if isinstance(child, ast.Import):
                    targets = [a.name for a in child.names]
                elif isinstance(child, ast.ImportFrom):
                    base = child.module or ""
                    if child.level:
                        up = package.split(".")[: len(package.split(".")) - (child.level - 1)]
                        base = ".".join(up + ([child.module] if child.module else []))
                    targets = [
                        f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in child.names
                    ]
                else:
                    continue
                for t in targets:
                    while t not in mods and "." in t:  # `import a.b.c` of a name inside a module
                        t = t.rpartition(".")[0]
                    if t in mods and t != mod:
                        graph[mod].add(t)
    return graph


def test_the_import_graph_has_no_cycle():
    graph = import_graph()
    assert (
        "casu_dataset.dataset.scene_cache" in graph["casu_dataset.dataset.executor"]
    )  # the graph sees real imports
    assert (
        "casu_dataset.dataset.ray_executor" in graph["casu_dataset.dataset.executor"]
    )  # function-level ones too
    try:
        graphlib.TopologicalSorter(graph).prepare()
    except graphlib.CycleError as err:
        pytest.fail("import cycle: " + " -> ".join(err.args[1]))


def test_no_package_has_an_import_cycle_even_through_type_only_imports():
    """Inside a package, a `TYPE_CHECKING` import counts too: modules that name each other's types
    are one job split in two (the runner's Unit lived in runner.py and batches.py imported it for
    its annotations: a type-only loop)."""

    def inside(graph):  # the edges between modules of one package
        return {
            m: {d for d in deps if d.rpartition(".")[0] == m.rpartition(".")[0]} for m, deps in graph.items()
        }

    graph = inside(import_graph(type_only=True))
    assert "harness.run.batches" in graph["harness.run.runner"]
    try:
        graphlib.TopologicalSorter(graph).prepare()
    except graphlib.CycleError as err:
        pytest.fail("import cycle (TYPE_CHECKING imports included): " + " -> ".join(err.args[1]))
    # The check sees a type-only import: the old loop, planted as source, is caught.
    planted = ROOT / "harness" / "run" / "_planted_type_loop.py"
    planted.write_text(
        "from typing import TYPE_CHECKING\n\nfrom harness.run import batches\n\n"
        "if TYPE_CHECKING:\n    from harness.run._planted_type_loop2 import X\n"
    )
    planted2 = ROOT / "harness" / "run" / "_planted_type_loop2.py"
    planted2.write_text("from harness.run._planted_type_loop import batches\n\nX = batches\n")
    try:
        with_loop = inside(import_graph(type_only=True))
        without = inside(import_graph())
    finally:
        planted.unlink()
        planted2.unlink()
    assert "harness.run._planted_type_loop2" not in without["harness.run._planted_type_loop"]
    with pytest.raises(graphlib.CycleError):
        graphlib.TopologicalSorter(with_loop).prepare()


def private_crossings() -> list[str]:
    """Every use of another project module's `_private` name: `from m import _x` (anywhere in a
    file) and `m._x` where `m` was imported as a project module. A name another module needs is
    part of its API and is named without the underscore."""
    mods = _modules()
    found = []
    for mod, path in mods.items():
        tree = ast.parse(path.read_text(), str(path))
        imported: dict[str, str] = {}  # local name -> project module
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module in mods:
                for a in node.names:
                    if a.name.startswith("_") and not a.name.startswith("__") and node.module != mod:
                        found.append(
                            f"{path.relative_to(ROOT)}:{node.lineno}: from {node.module} import {a.name}"
                        )
                    if f"{node.module}.{a.name}" in mods:
                        imported[a.asname or a.name] = f"{node.module}.{a.name}"
            elif isinstance(node, ast.Import):
                for a in node.names:
                    if a.name in mods and a.asname:
                        imported[a.asname] = a.name
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id in imported
                and imported[node.value.id] != mod
                and node.attr.startswith("_")
                and not node.attr.startswith("__")
            ):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {node.value.id}.{node.attr}")
    return found


def test_no_module_uses_another_modules_private_names(tmp_path):
    assert private_crossings() == []
    # The scan sees both forms (a planted module that uses each).
    planted = ROOT / "casu_dataset" / "core" / "_planted_private_use.py"
    planted.write_text(
        "from casu_dataset.mix.mixer import _plan\nfrom casu_dataset.core import loudness\n"
        "x = loudness._fit_block\n"
    )
    try:
        found = private_crossings()
    finally:
        planted.unlink()
    assert len(found) == 2 and "import _plan" in found[0] and "loudness._fit_block" in found[1], found


# -- 5. library messages go through logging ------------------------------------------------------


def test_console_logging_shows_library_messages_as_the_cli_printed_them(capsys):
    from casu_dataset.core.log import _Console, setup_console_logging

    logger = logging.getLogger("casu_dataset")
    before = (logger.level, list(logger.handlers))
    try:
        setup_console_logging()
        setup_console_logging()  # idempotent: one line per message
        logging.getLogger("casu_dataset.dataset.build").info("review: a notice")
        logging.getLogger("casu_dataset.dataset.ray_executor").warning("ray: a warning")
        logging.getLogger("casu_dataset.dataset.build").debug("not shown")
        out, err = capsys.readouterr()
        assert out == "review: a notice\n" and err == "ray: a warning\n"
    finally:
        for h in logger.handlers:
            if isinstance(h, _Console) and h not in before[1]:
                logger.removeHandler(h)
        logger.setLevel(before[0])


def test_library_modules_do_not_print():
    """Only command-line code prints: the CLI modules and a module's own `main()`."""
    cli_modules = {"__main__.py"}
    printing = []
    for p in (ROOT / "casu_dataset").rglob("*.py"):
        if p.name in cli_modules or p.parent.name == "cli":  # casu_dataset/cli/: one module per command
            continue
        tree = ast.parse(p.read_text())
        mains = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "main"]
        allowed = {id(c) for m in mains for c in ast.walk(m)}
        printing += [
            f"{p.relative_to(ROOT)}:{n.lineno}"
            for n in ast.walk(tree)
            if isinstance(n, ast.Call) and getattr(n.func, "id", None) == "print" and id(n) not in allowed
        ]
    assert printing == []


# -- 6. module size -------------------------------------------------------------------------------

MAX_MODULE_LINES = 600
#: A module may be longer only where it says why, in a comment line near its top.
LONG_REASON = "# Over 600 lines because "


def long_modules(paths) -> list[str]:
    """The modules over MAX_MODULE_LINES lines without a written reason (a LONG_REASON comment,
    with some words after it, among their first 40 lines)."""
    found = []
    for p in paths:
        lines = Path(p).read_text().splitlines()
        reason = any(ln.startswith(LONG_REASON) and len(ln) > len(LONG_REASON) + 10 for ln in lines[:40])
        if len(lines) > MAX_MODULE_LINES and not reason:
            found.append(f"{p}: {len(lines)} lines")
    return found


def test_no_module_is_over_600_lines_without_a_written_reason(tmp_path):
    assert long_modules([*_modules().values(), *(ROOT / "benchmarks").glob("*.py")]) == []
    # The check sees a long module, and accepts one that says why (a planted pair).
    long = tmp_path / "long.py"
    long.write_text("x = 1\n" * (MAX_MODULE_LINES + 1))
    assert long_modules([long]) == [f"{long}: {MAX_MODULE_LINES + 1} lines"]
    long.write_text(f"{LONG_REASON}it is one table of cases.\n" + "x = 1\n" * MAX_MODULE_LINES)
    assert long_modules([long]) == []
