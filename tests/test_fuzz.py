"""Property-based tests: the readers of user input (family YAML, task YAML, scene annotations given
to regenerate, built parquet files) either accept an input or refuse it with a named CasuError;
any other exception is a failure to name bad input. Examples are derandomized (the same in every
run) and bounded, so CI stays reproducible and within its time budget."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest
import yaml
from conftest import tiny_dataset
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from casu_dataset.core.errors import CasuError

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "fixtures" / "families" / "two_families.yaml"
FUZZ = settings(
    max_examples=60,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)

# Values a hand edit or a damaged file puts where something else was expected.
ODD = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**13), max_value=10**13),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.just([]),
    st.just({}),
    st.lists(st.integers(-3, 3), max_size=3),
    st.dictionaries(st.text(max_size=4), st.integers(), max_size=2),
)


def _paths(tree, prefix=()):
    """Every (path) into a JSON-like tree: dict keys and list indices."""
    out = [prefix] if prefix else []
    if isinstance(tree, dict):
        for k, v in tree.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(tree, list):
        for i, v in enumerate(tree):
            out += _paths(v, (*prefix, i))
    return out


def _mutate(tree, path, value, delete: bool):
    tree = json.loads(json.dumps(tree))
    node = tree
    for k in path[:-1]:
        node = node[k]
    if delete and isinstance(node, dict):
        node.pop(path[-1])
    else:
        node[path[-1]] = value
    return tree


def _named_or_fine(fn):
    try:
        fn()
    except CasuError:
        pass


# -- family YAML ---------------------------------------------------------------------------------

FAMILIES = yaml.safe_load(FIXTURE.read_text())
FAMILY_PATHS = _paths(FAMILIES)


@FUZZ
@given(path=st.sampled_from(FAMILY_PATHS), value=ODD, delete=st.booleans())
def test_a_mutated_family_file_compiles_or_is_named(tmp_path_factory, path, value, delete):
    from casu_dataset.families.compile import compile_families

    f = tmp_path_factory.mktemp("fam") / "families.yaml"
    f.write_text(yaml.safe_dump(_mutate(FAMILIES, path, value, delete), allow_unicode=True))
    _named_or_fine(lambda: compile_families(f))


@FUZZ
@given(text=st.text(max_size=200))
def test_any_text_as_a_family_file_compiles_or_is_named(tmp_path_factory, text):
    from casu_dataset.families.compile import compile_families

    f = tmp_path_factory.mktemp("famtext") / "families.yaml"
    f.write_text(text)
    _named_or_fine(lambda: compile_families(f))


# -- task YAML -----------------------------------------------------------------------------------


def _task():
    from harness.task.config import builtin_tasks_dir

    return yaml.safe_load((builtin_tasks_dir() / "role_inference.yaml").read_text())


TASK = _task()


@FUZZ
@given(path=st.sampled_from(_paths(TASK)), value=ODD, delete=st.booleans())
def test_a_mutated_task_yaml_loads_or_is_named(tmp_path_factory, path, value, delete):
    from harness.task.config import load_task

    f = tmp_path_factory.mktemp("task") / "role_inference.yaml"
    f.write_text(yaml.safe_dump(_mutate(TASK, path, value, delete), allow_unicode=True))
    _named_or_fine(lambda: load_task(f))


# -- annotations given to regenerate -------------------------------------------------------------


@pytest.fixture(scope="module")
def annotation(clips_dir, speech_wavs):
    from casu_dataset.mix.mixer import SceneSources, SourceRef, compose
    from casu_dataset.script.schema import parse_script

    script = parse_script(
        {
            "id": "fuzz",
            "place": "school",
            "speech_type": "monologue",
            "background": {"description": "a playground", "keywords": ["playground"]},
            "speakers": [{"id": "A", "role": "teacher", "gender": "female"}],
            "turns": [{"speaker": "A", "text": "Line up, please."}],
            "events": [
                {
                    "id": "e0",
                    "description": "a bell",
                    "keywords": ["bell"],
                    "anchor": {"type": "after_turn", "turn": 0},
                }
            ],
        }
    )
    src = SceneSources(
        SourceRef(str(clips_dir / "ba__school_playground__School1.ogg"), "bed"),
        [SourceRef(str(speech_wavs[0]), "turn")],
        [SourceRef(str(clips_dir / "ev__electric_bell_ring__savebell2.ogg"), "bell")],
    )
    return compose(script, src, seed=0).annotation


def test_a_mutated_annotation_regenerates_or_is_named(annotation):
    from casu_dataset.mix.regenerate import regenerate

    # Mutations of the fields regenerate reads (the script and the records it only carries along
    # are not rendered from).
    paths = [
        p
        for p in _paths(annotation)
        if p[0]
        in (
            "sample_rate",
            "background",
            "turns",
            "events",
            "plan",
            "gains",
            "mix_config",
            "format",
            "version",
        )
    ]

    @settings(FUZZ, max_examples=120, suppress_health_check=list(HealthCheck))
    @given(path=st.sampled_from(paths), value=ODD, delete=st.booleans())
    def check(path, value, delete):
        ann = _mutate(annotation, path, value, delete)
        _named_or_fine(lambda: regenerate(ann))

    check()


# -- built parquet files: bit flips and truncations ----------------------------------------------


@pytest.fixture(scope="module")
def small_folder(tmp_path_factory):
    return tiny_dataset(tmp_path_factory.mktemp("pq") / "ds", 6, "fz")


def test_a_damaged_parquet_file_reads_or_is_named(small_folder, tmp_path_factory):
    from casu_dataset.formats.reader import BuiltDataset

    f = next((small_folder / "role_inference").glob("*.parquet"))
    blob = f.read_bytes()

    @settings(FUZZ, max_examples=80, suppress_health_check=list(HealthCheck))
    @given(
        flips=st.lists(st.tuples(st.integers(0, len(blob) - 1), st.integers(0, 7)), min_size=1, max_size=4),
        cut=st.one_of(st.none(), st.integers(0, len(blob) - 1)),
    )
    def check(flips, cut):
        b = bytearray(blob)
        for i, bit in flips:
            b[i] ^= 1 << bit
        if cut is not None:
            b = b[:cut]
        d = tmp_path_factory.mktemp("dmg")
        shutil.copytree(small_folder, d, dirs_exist_ok=True)
        (d / "role_inference" / f.name).write_bytes(bytes(b))

        def read():
            for r in BuiltDataset(d).rows("role_inference"):
                x = r.waveform
                assert x.ndim == 1 and all(math.isfinite(v) for v in x[:10])

        _named_or_fine(read)

    check()


# -- lm-eval-style task templates: random Jinja over random rows -----------------------------------

# Pieces of Jinja a template is assembled from: names of the row, literals, operators, filters,
# loops, macros and calls, including the costly ones (big ranges, powers, repetition, recursion).
_NAMES = ["question", "options", "answer", "hint", "choices", "place", "n", "missing"]
_ATOMS = st.one_of(
    st.sampled_from(_NAMES),
    st.sampled_from(
        ["1", "0", "-1", "10**6", "9**9", "'x'", "'²'", "[]", "[1, 2]", "none", "true", "range(5)"]
    ),
    st.integers(-(10**6), 10**12).map(str),
    st.text(alphabet="ab{}%#'\"\\ ", max_size=4).map(repr),
)
_OPS = st.sampled_from(["+", "-", "*", "**", "/", "//", "%", "~", " and ", " or ", " in ", "==", "<"])
_FILTERS = st.sampled_from(
    ["upper", "length", "list", "join(', ')", "center(10**7)", "replace('a', 'bb')", "int", "first", "sum",
     "batch(3)", "indent(4)", "format(1)", "e", "trim", "sort", "unique", "string", "wordwrap(5)", "tojson"]
)  # fmt: skip


@st.composite
def _expr(draw, depth=0):
    kind = draw(st.integers(0, 5 if depth < 3 else 1))
    if kind <= 1:
        return draw(_ATOMS)
    if kind == 2:
        return f"({draw(_expr(depth + 1))}{draw(_OPS)}{draw(_expr(depth + 1))})"
    if kind == 3:
        return f"{draw(_expr(depth + 1))}|{draw(_FILTERS)}"
    if kind == 4:
        return f"{draw(_expr(depth + 1))}[{draw(_expr(depth + 1))}]"
    return f"range({draw(_expr(depth + 1))})"


@st.composite
def _template(draw, depth=0):
    parts = []
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.integers(0, 7 if depth < 3 else 2))
        if kind == 0:
            parts.append(draw(st.text(alphabet="ab {}%#\n", max_size=6)))
        elif kind in (1, 2):
            parts.append("{{ " + draw(_expr()) + " }}")
        elif kind == 3:
            parts.append(f"{{% for x in {draw(_expr())} %}}{draw(_template(depth + 1))}{{% endfor %}}")
        elif kind == 4:
            parts.append(f"{{% if {draw(_expr())} %}}{draw(_template(depth + 1))}{{% else %}}x{{% endif %}}")
        elif kind == 5:
            body = draw(_template(depth + 1))
            parts.append(
                f"{{% macro m(k) %}}{body}{{{{ m(k ~ k) if k|length < 8 else k }}}}{{% endmacro %}}"
                "{{ m('a') }}"
            )
        elif kind == 6:
            parts.append(
                draw(st.sampled_from(["{% include 'x' %}", "{% extends 'y' %}", "{% import 'z' as q %}"]))
            )
        else:
            parts.append(f"{{% set v = {draw(_expr())} %}}{{{{ v }}}}")
    return "".join(parts)


_ROW_VALUES = st.one_of(
    st.text(max_size=20),
    st.integers(-(10**20), 10**20),
    st.lists(st.text(max_size=5), max_size=5),
    st.none(),
    st.floats(allow_nan=True),
)


@settings(FUZZ, max_examples=250)
@given(
    text=st.one_of(_template(), st.text(alphabet="{}%#()[]|~*'\" abxn0123456789.-+", max_size=60)),
    row=st.fixed_dictionaries({k: _ROW_VALUES for k in _NAMES[:-1]}),
)
def test_any_template_over_any_row_renders_or_is_named_within_budget(text, row):
    """A task template (lm-eval's Jinja) over a row: its text, or one LmEvalYamlError line; never
    another exception, and never longer than the render budget (plus scheduling slack)."""
    import time

    from harness.task import lmeval_yaml, sandbox

    t0 = time.perf_counter()
    try:
        lmeval_yaml.check_template(text, "doc_to_text")
        out = lmeval_yaml.render(text, row, "doc_to_text")
        assert len(out) <= sandbox.OUTPUT_CHARS
        try:
            lmeval_yaml.choices(text, row)
        except lmeval_yaml.LmEvalYamlError:
            pass
    except lmeval_yaml.LmEvalYamlError as err:
        assert "\n" not in str(err) and str(err).startswith(("doc_to_text", "doc_to_choice")), str(err)
    took = time.perf_counter() - t0
    assert took < 4 * sandbox.RENDER_SECONDS + 1.0, f"{took:.2f} s for {text!r}"


# -- run configuration files (--config): random YAML documents ------------------------------------------

_CONFIG_VALUES = st.recursive(
    ODD | st.sampled_from(["all", "list", "role_inference", "full", "random", "auto", "a,b"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=2),
    max_leaves=6,
)


def _config_keys():
    from harness.config import config_keys

    return config_keys()


@st.composite
def _config_doc(draw) -> str:
    kind = draw(st.integers(0, 4))
    if kind == 0:
        return draw(st.text(max_size=80))
    keys = st.one_of(st.sampled_from(_config_keys()), st.text(max_size=6))
    doc = draw(st.dictionaries(keys, _CONFIG_VALUES, max_size=4))
    text = yaml.safe_dump(doc, allow_unicode=True)
    if kind == 1:  # aliases: a value used many times over
        text = "base: &b [1, 2, 3]\n" + text + "tasks: [*b, *b]\n"
    return text


@settings(FUZZ, max_examples=25)
@given(text=_config_doc())
def test_any_config_file_runs_or_is_one_named_line(tmp_path_factory, text):
    """`python -m harness --config FILE` with any YAML document: exit 0 or 2, never a traceback;
    an error is one line naming what was wrong (the run itself is kept from starting: --dataset
    names a folder that is not there)."""
    from bad_input_corpus import harness

    d = tmp_path_factory.mktemp("cfg")
    f = d / "run.yaml"
    f.write_text(text)
    o = harness(
        "--config", str(f), "--model", "random", "--dataset", str(d / "none"), "--output_path", str(d / "o")
    )
    assert o.code is not None and "Traceback" not in o.text, o.text[-2000:]
    assert o.code in (0, 2), o.text[-1000:]
    if o.code == 2:
        errors = [ln for ln in o.text.splitlines() if ln.startswith("error:")]
        assert len(errors) == 1, o.text[-1000:]
