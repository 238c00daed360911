"""strict_yaml.safe_load's libyaml fast path: the same objects as the pure-Python loader on every
YAML file the repository ships (the family library compiles to the same scenes), and the same
errors, snippets included, for a duplicate key, an alias bomb and broken YAML."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest
import yaml

from casu_dataset.core import strict_yaml
from casu_dataset.core.strict_yaml import DuplicateKeyError, TooLargeError, safe_load

REPO = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.skipif(strict_yaml._FastLoader is None, reason="PyYAML built without libyaml")


def _pure(text: str, name: str, max_nodes: int | None = None):
    return strict_yaml._load(strict_yaml._StrictLoader, text, name, max_nodes)


def _fast_only(text: str, name: str, max_nodes: int | None = None):
    return strict_yaml._load(strict_yaml._FastLoader, text, name, max_nodes)


def _error(fn, *args) -> tuple[type, str]:
    with pytest.raises(yaml.YAMLError) as info:
        fn(*args)
    return type(info.value), str(info.value)


def test_every_shipped_yaml_file_loads_to_the_same_objects():
    files = [p for d in ("casu_dataset", "tasks", "harness") for p in sorted((REPO / d).rglob("*.y*ml"))]
    assert len(files) > 20
    for p in files:
        text = p.read_text(encoding="utf-8")
        assert repr(_fast_only(text, str(p))) == repr(_pure(text, str(p))), p


def test_the_family_library_compiles_to_the_same_scenes(monkeypatch):
    from casu_dataset.families.compile import DEFAULT_FAMILY_LIBRARY, compile_families

    fast = compile_families(DEFAULT_FAMILY_LIBRARY)
    monkeypatch.setattr(strict_yaml, "_FastLoader", None)
    pure = compile_families(DEFAULT_FAMILY_LIBRARY)
    assert len(fast) == len(pure) > 1000
    assert pickle.dumps(fast) == pickle.dumps(pure)


def test_a_duplicate_key_gives_the_pure_loaders_message():
    text = "families:\n  - id: a\n    q: one\n    q: two\n"
    kind, msg = _error(safe_load, text, "lib.yaml")
    assert (kind, msg) == _error(_pure, text, "lib.yaml")
    assert kind is DuplicateKeyError
    assert "found the key 'q' twice (first on line 3)" in msg and 'in "lib.yaml", line 4, column 5' in msg


def test_an_alias_bomb_and_broken_yaml_give_the_pure_loaders_errors():
    lines = ['a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    lines += [f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 9)]
    bomb = "\n".join(lines) + "\n"
    kind, msg = _error(safe_load, bomb, "bomb.yaml", 100_000)
    assert kind is TooLargeError and "alias bomb" in msg
    assert (kind, msg) == _error(_pure, bomb, "bomb.yaml", 100_000)
    assert safe_load(bomb, "bomb.yaml")["a0"] == ["lol"] * 9  # no limit: loaded, as before
    for broken in ("a: [1, 2\n", "a: b: c\n", "- x\ny: 1\n"):
        got = _error(safe_load, broken, "b.yaml")
        assert got == _error(_pure, broken, "b.yaml"), broken
        assert got[1] != str(_error(_fast_only, broken, "b.yaml")[1])  # libyaml words it otherwise
    for broken in ("a: 'open\n", "- \ud800\n"):  # libyaml fails these outside yaml.YAMLError too
        with pytest.raises(Exception) as fast:
            safe_load(broken, "b.yaml")
        with pytest.raises(Exception) as pure:
            _pure(broken, "b.yaml")
        assert (type(fast.value), str(fast.value)) == (type(pure.value), str(pure.value))
