"""strict_yaml.load_library_text: a library file's parse, memoised on disk by its text. A hit is the
value the parse gives (types, key order, shared aliases), for every YAML file the repository ships
and for the compiled family library; errors, timestamps and broken entries are never served."""

from __future__ import annotations

import datetime
import pickle
from pathlib import Path

import pytest
import yaml

from casu_dataset.core import strict_yaml
from casu_dataset.core.strict_yaml import DuplicateKeyError, load_library_text

REPO = Path(__file__).resolve().parent.parent


def _entries(cache: Path) -> list[Path]:
    d = cache / "parsed_yaml"
    return sorted(d.iterdir()) if d.is_dir() else []


@pytest.fixture
def no_parse(monkeypatch):
    """After this, any parse fails the test: what loads came from the memo."""

    def refuse(*a, **k):
        raise AssertionError("parsed again")

    return lambda: monkeypatch.setattr(strict_yaml, "safe_load", refuse)


def _typed(v):
    """A value with every type spelled out (True and 1, 1.0 and 1 compare equal)."""
    if isinstance(v, dict):
        return ("dict", [(_typed(k), _typed(x)) for k, x in v.items()])
    if isinstance(v, list):
        return ("list", [_typed(x) for x in v])
    return (type(v).__name__, repr(v))


def test_every_shipped_yaml_file_comes_back_from_the_memo_as_parsed(tmp_path, no_parse):
    files = [p for d in ("casu_dataset", "tasks", "harness") for p in sorted((REPO / d).rglob("*.y*ml"))]
    assert len(files) > 20
    texts = {p: p.read_text(encoding="utf-8") for p in files}
    parsed = {p: strict_yaml.safe_load(t, p) for p, t in texts.items()}
    for p, t in texts.items():
        assert _typed(load_library_text(t, p, tmp_path)) == _typed(parsed[p]), p
    assert len(_entries(tmp_path)) == len(set(texts.values()))
    no_parse()
    for p, t in texts.items():
        assert _typed(load_library_text(t, p, tmp_path)) == _typed(parsed[p]), p


def test_the_family_library_compiles_to_the_same_scenes_from_the_memo(tmp_path, monkeypatch, no_parse):
    from casu_dataset.families.compile import DEFAULT_FAMILY_LIBRARY, compile_families

    monkeypatch.setenv("CASU_CACHE", str(tmp_path))
    first = compile_families(DEFAULT_FAMILY_LIBRARY)
    assert len(_entries(tmp_path)) == len(list(Path(DEFAULT_FAMILY_LIBRARY).glob("*.y*ml")))
    no_parse()
    again = compile_families(DEFAULT_FAMILY_LIBRARY)
    assert len(again) == len(first) > 1000
    assert pickle.dumps(again) == pickle.dumps(first)


def test_aliases_stay_shared_and_types_and_order_stay(tmp_path, no_parse):
    text = (
        "base: &b {z: 1, a: [1, 1.0, true, null, '1', -0.0, .inf]}\n"
        "use: [*b, *b]\nset: !!set {x, y}\nbin: !!binary AAEC\n"
    )
    fresh = load_library_text(text, "t.yaml", tmp_path)
    no_parse()
    got = load_library_text(text, "t.yaml", tmp_path)
    assert _typed(got) == _typed(fresh) and list(got["base"]) == ["z", "a"]
    assert got["use"][0] is got["use"][1] is got["base"]
    assert got["set"] == {"x", "y"}
    assert got["bin"] == b"\x00\x01\x02"


def test_errors_and_timestamps_are_never_memoised(tmp_path):
    bad = "a: 1\na: 2\n"
    for _ in range(2):
        with pytest.raises(DuplicateKeyError, match="t.yaml"):
            load_library_text(bad, "t.yaml", tmp_path)
    with pytest.raises(yaml.YAMLError, match="t.yaml"):
        load_library_text("a: [1, 2\n", "t.yaml", tmp_path)
    assert load_library_text("day: 2026-12-07\n", "t.yaml", tmp_path) == {"day": datetime.date(2026, 12, 7)}
    assert _entries(tmp_path) == []


def test_a_broken_entry_is_parsed_again_and_rewritten(tmp_path, monkeypatch):
    text = "families: [{id: a, q: one}]\n"
    want = load_library_text(text, "t.yaml", tmp_path)
    (entry,) = _entries(tmp_path)
    for broken in (entry.read_bytes()[:-3], b"", b"\x00" * 40, entry.read_bytes()[:32] + b"\xff" * 9):
        entry.write_bytes(broken)
        assert load_library_text(text, "t.yaml", tmp_path) == want
        assert entry.read_bytes()[32:] and strict_yaml.hashlib.sha256(entry.read_bytes()[32:]).digest() == (
            entry.read_bytes()[:32]
        )
    # Another text, or another parser version, is another entry.
    load_library_text(text + "# note\n", "t.yaml", tmp_path)
    monkeypatch.setattr(strict_yaml, "PARSED_VERSION", strict_yaml.PARSED_VERSION + 1)
    load_library_text(text, "t.yaml", tmp_path)
    assert len(_entries(tmp_path)) == 3


def test_an_unwritable_cache_costs_only_the_parse(tmp_path):
    (tmp_path / "parsed_yaml").write_text("a file where the folder would be")
    assert load_library_text("a: 1\n", "t.yaml", tmp_path) == {"a": 1}
