"""Bad inputs, round 4 (issue 44), the harness side: hostile task templates (the Jinja sandbox:
no loader, bounded time, size, range and recursion; choice lists and targets), special files and
links (FIFOs, devices, symlink loops, dangling links) as every path the harness reads or writes,
concurrent runs into one folder, malformed --config files and launcher variables, adapters that
return the wrong things, and SIGINT/SIGTERM during a run.

Each case must end in one named line (the documented exit code, no traceback), quickly (a hang is
a failure), or in the right result (`OK` cases: valid inputs keep working, nothing lost). The rules
are tests/bad_input_corpus.py's. `python tests/test_bad_inputs_round4.py` runs every case in its
own forked process with a hard timeout and prints the table of verdicts (tracebacks / silent /
unnamed / hangs / handled); with PYTHONPATH pointing at another checkout it measures that code."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import pytest
from bad_input_corpus import OK, SKIP, Ctx, E, Outcome, call, classify, duplicate_ids
from helpers import harness_argv

from casu_dataset.core.env_vars import environment

HERE = Path(__file__).resolve().parent
FIXTURES = HERE / "fixtures"
sys.path.insert(0, str(FIXTURES))  # bad_adapters
CASE_S = 20.0  # a case that runs longer has hung (the budget of a render is 0.25 s)


def harness(*argv) -> Outcome:
    from harness.cli.main import main

    return call(main, list(argv))


def run(c: Ctx, *argv, tasks="role_inference", model="random", out=None, ds=None) -> Outcome:
    return harness(*harness_argv(ds or c.ds, out or c.tmp / "res", *argv, model=model, tasks=tasks))


# -- lm-eval-style task templates ----------------------------------------------------------------

GOOD_TEXT = (
    "{{hint}}{{question}}\n{% for o in options %}{{ 'ABCD'[loop.index0] }}. {{o}}\n{% endfor %}Answer:"
)


def lm_task(c: Ctx, text=GOOD_TEXT, choice="{{options}}", target="{{answer}}", extra="", name="t") -> Path:
    """A folder with one lm-eval-style task `roles_lm` (file `t.yaml`) over role_inference."""
    import json

    d = c.tmp / "tasks"
    d.mkdir(parents=True, exist_ok=True)
    lines = [
        "task: roles_lm",
        "dataset_name: role_inference",
        "output_type: multiple_choice",
        f"doc_to_text: {json.dumps(text)}",
        f"doc_to_choice: {json.dumps(choice)}",
        f"doc_to_target: {json.dumps(target)}",
        "metric_list: [{metric: acc}]",
        extra,
    ]
    (d / f"{name}.yaml").write_text("\n".join(lines) + "\n")
    return d


def template_case(text=GOOD_TEXT, choice="{{options}}", target="{{answer}}", extra=""):
    def go(c: Ctx) -> Outcome:
        d = lm_task(c, text, choice, target, extra)
        return run(c, "--include_path", str(d), tasks="roles_lm")

    return go


TEMPLATE_TEXTS: dict[str, str] = {}  # the doc_to_text attacks by case id


def T(case_id, text, *needles, field="doc_to_text"):
    """A doc_to_text attack: one line naming the file, the field (and what), exit 2."""
    TEMPLATE_TEXTS[f"tmpl-{case_id}"] = text
    return (f"tmpl-{case_id}", template_case(text=text), (E, 2, "t.yaml", field, *needles))


ROW = "b_scene0/q0"  # the first row of the corpus dataset: a render error names it
TEMPLATE_CASES = [
    T("include", "{% include 'other.yaml' %}", "{% include %}"),
    T("extends-passwd", "{% extends '/etc/passwd' %}", "{% extends %}"),
    T("import", "{% import 'x.j2' as x %}{{ x.y }}", "{% import %}"),
    T("from-import", "{% from 'x.j2' import y %}{{ y() }}", "{% from ... import %}"),
    T("include-in-if", "{% if false %}{% include 'x' %}{% endif %}{{question}}", "{% include %}"),
    T("recursive-macro", "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", ROW, "nested"),
    T(
        "mutual-macros",
        "{% macro a() %}{{ b() }}{% endmacro %}{% macro b() %}{{ a() }}{% endmacro %}{{ a() }}",
        ROW,
    ),
    T("range-huge", "{{ range(10**20)|list }}", ROW, "range"),
    T("range-1e9-loop", "{% for i in range(10**9) %}{% endfor %}{{question}}", ROW, "range"),
    T(
        "nested-loops-1e10",
        "{% for i in range(10000) %}{% for j in range(10000) %}{% for k in range(100) %}{% endfor %}"
        "{% endfor %}{% endfor %}{{question}}",
        ROW,
        "budget",
    ),
    T(
        "nested-loops-output",
        "{% for i in range(10000) %}{% for j in range(10000) %}xx{% endfor %}{% endfor %}",
        ROW,
        "100,000",
    ),
    T("pow-tower", "{{ 9**(9**9) }}", ROW, "bits"),
    T("pow-tower-left", "{{ (9**9)**(9**9) }}", ROW, "bits"),
    T("pow-float", "{{ 9.0**(9**9) }}", ROW, "OverflowError"),
    T("mul-string", "{{ 'x' * 10**12 }}", ROW, "repetition"),
    T("mul-list", "{{ [1, 2] * 10**9 }}", ROW, "repetition"),
    T("mul-bigints", "{{ (10**1000)*(10**1000)*(10**1000)*(10**1000)*(10**1000) }}", ROW, "bits"),
    T("lipsum", "{{ lipsum(10**6) }}", ROW, "lipsum"),
    T("center-filter", "{{ question|center(10**9) }}", ROW, "center"),
    T("center-method", "{{ question.center(10**9) }}", ROW, "center"),
    T("ljust-method", "{{ question.ljust(10**9) }}", ROW, "ljust"),
    T("percent-format", "{{ '%0999999999d' % 1 }}", ROW, "format string"),
    T("percent-star", "{{ '%*d' % (10**9, 1) }}", ROW, "format string"),
    T("brace-format", "{{ '{:>999999999}'.format(1) }}", ROW, "format string"),
    T("brace-format-nested", "{{ '{:>{w}}'.format(1, w=10**8) }}", ROW),
    T("format-filter", "{{ '%0999999999d'|format(1) }}", ROW, "format string"),
    T(
        "doubling-macro",
        "{% macro f(s, n) %}{{ f(s ~ s, n - 1) if n else s }}{% endmacro %}{{ f('x', 40) }}",
        ROW,
    ),
    T(
        "namespace-doubling",
        "{% set ns = namespace(s='x') %}{% for i in range(60) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}"
        "{{ ns.s|length }}",
        ROW,
        "concatenation",
    ),
    T(
        "string-loops",
        "{% set s = 'x' * 90000 %}{% for a in s %}{% for b in s %}{% endfor %}{% endfor %}{{question}}",
        ROW,
        "budget",
    ),
    T("join-amplify", "{{ ('x' * 90000).join('y' * 90000) }}", ROW, "join"),
    T("replace-amplify", "{{ ('x' * 90000)|replace('x', 'y' * 90000) }}", ROW, "replace"),
    T("indent-amplify", "{{ ('x\\n' * 50000)|indent('y' * 50000) }}", ROW, "indent"),
    T("batch-huge", "{{ options|batch(10**9, 'x')|list }}", ROW, "batch"),
    T("recursive-loop", "{% for x in options recursive %}{{ loop([x]) }}{% endfor %}", ROW, "nested"),
    T("sum-pow", "{{ (range(10)|sum) ** (10**6) }}", ROW, "bits"),
    T("concat-big", "{{ 'x' ~ ('y' * 99999) ~ ('z' * 99999) }}", ROW, "concatenation"),
    T("div-zero", "{{ 1 / 0 }}", ROW, "ZeroDivisionError"),
    T("type-error", "{{ 'a' + 1 }}", ROW, "TypeError"),
    T("undefined-column", "{{ no_such_column }}", ROW, "no_such_column", "columns"),
    T("deep-parens", "{{ " + "(" * 5000 + "1" + ")" * 5000 + " }}", "nested"),
    T("syntax-error", "{% for x in options %}{{x}}", "not a valid Jinja template"),
    T("dunder-class", "{{ question.__class__.__mro__ }}", ROW, "unsafe"),
    T("format-dunder", "{{ '{0.__class__}'.format(question) }}", ROW, "unsafe"),
    # choice lists
    ("choice-one-listed", template_case(choice=["only"]), (E, 2, "t.yaml", "doc_to_choice", "at least 2")),
    ("choice-dup-listed", template_case(choice=["a", "a", "b"]), (E, 2, "t.yaml", "doc_to_choice", "same")),
    ("choice-empty-listed", template_case(choice=["", "b"]), (E, 2, "t.yaml", "doc_to_choice", "empty")),
    ("choice-blank-listed", template_case(choice=["a", "  "]), (E, 2, "t.yaml", "doc_to_choice", "empty")),
    (
        "choice-one-rendered",
        template_case(choice="{{ [options[0]] }}"),
        (E, 2, "t.yaml", "doc_to_choice", ROW, "at least 2"),
    ),
    (
        "choice-dup-rendered",
        template_case(choice="{{ [options[0], options[0]] }}"),
        (E, 2, "t.yaml", "doc_to_choice", ROW, "same"),
    ),
    ("choice-not-list", template_case(choice="{{ question }}"), (E, 2, "t.yaml", "doc_to_choice", ROW)),
    ("choice-empty-list", template_case(choice="[]"), (E, 2, "t.yaml", "doc_to_choice", ROW)),
    (
        "choice-deep-list",
        template_case(choice="{{ '[' * 3000 }}{{ ']' * 3000 }}"),
        (E, 2, "t.yaml", "doc_to_choice", ROW),
    ),
    (
        "choice-huge-render",
        template_case(choice="{{ options * 10**8 }}"),
        (E, 2, "t.yaml", "doc_to_choice", ROW),
    ),
    # targets
    ("target-superscript", template_case(target="{{ '²' }}"), (E, 2, "t.yaml", "doc_to_target", ROW)),
    ("target-5000-digits", template_case(target="{{ '9' * 5000 }}"), (E, 2, "t.yaml", "doc_to_target", ROW)),
    ("target-index-out", template_case(target="7"), (E, 2, "t.yaml", "doc_to_target", ROW, "index 7")),
    ("target-negative", template_case(target="{{ -1 }}"), (E, 2, "t.yaml", "doc_to_target", ROW)),
    ("target-not-choice", template_case(target="{{ question }}"), (E, 2, "t.yaml", "doc_to_target", ROW)),
    ("target-huge-int", template_case(target=10**30), (E, 2, "t.yaml", "doc_to_target", ROW)),
    ("target-list-column", template_case(target="options"), (E, 2, "t.yaml", "doc_to_target", ROW)),
    (
        "target-budget",
        template_case(
            target="{% for i in range(10000) %}{% for j in range(10000) %}{% endfor %}{% endfor %}"
        ),
        (E, 2, "t.yaml", "doc_to_target", ROW),
    ),
    # valid templates keep working (jinja's |int turns what it cannot read into 0, as lm-eval's does)
    ("tmpl-ok-int-filter-big", template_case(text="{{ ('9' * 5000)|int }} {{ question }}"), (OK, "results:")),
    ("tmpl-ok-documented", template_case(), (OK, "results:")),
    (
        "tmpl-ok-mmlu",
        template_case(
            text="{{question.strip()}}\nA. {{options[0]}}\nB. {{options[1]}}\nC. {{options[2]}}"
            "\nD. {{options[3]}}\nAnswer:",
            choice=["A", "B", "C", "D"],
            target="answer",
        ),
        (OK, "results:"),
    ),
    (
        "tmpl-ok-filters",
        template_case(
            text="{{ question|upper }} {{ options|join(', ') }} {{ '%s/%d' % ('a', 2) }} {{ 2**10 }} "
            "{{ range(3)|list }} {% set ns = namespace(n=0) %}{% for o in options %}{% set ns.n = ns.n + 1 %}"
            "{% endfor %}{{ ns.n }} {{ '{:>5}'.format('x') }}"
        ),
        (OK, "results:"),
    ),
]


# -- include chains ----------------------------------------------------------------------------------


def include_case(kind: str):
    def go(c: Ctx) -> Outcome:
        d = lm_task(c, extra="include: base.yaml")
        base = d / "base.yaml"
        if kind == "chain-1200":
            for i in range(1200):
                nxt = f"b{i + 1}.yaml" if i < 1199 else None
                (d / ("base.yaml" if i == 0 else f"b{i}.yaml")).write_text(
                    (f"include: {nxt}\n" if nxt else "") + f"description: 'level {i} '\n"
                )
        elif kind == "cycle":
            base.write_text("include: t.yaml\n")
        elif kind == "fifo":
            os.mkfifo(base)
        elif kind == "dev-zero":
            base.symlink_to("/dev/zero")
        elif kind == "loop":
            base.symlink_to(base)
        elif kind == "dangling":
            base.symlink_to(d / "nowhere.yaml")
        elif kind == "folder":
            base.mkdir()
        elif kind == "huge":
            base.write_text("description: '" + "x" * (2 << 20) + "'\n")
        elif kind == "alias-bomb":
            base.write_text(alias_bomb())
        elif kind == "not-a-name":
            (d / "t.yaml").write_text(
                (d / "t.yaml").read_text().replace("include: base.yaml", "include: [a, b]")
            )
        elif kind == "ok":
            base.write_text("description: 'Listen. '\n")
        return run(c, "--include_path", str(d), tasks="roles_lm")

    return go


def alias_bomb(levels: int = 9) -> str:
    lines = ['a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for i in range(1, levels):
        lines.append(f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * 9) + "]")
    return "\n".join(lines) + "\n"


INCLUDE_CASES = [
    ("include-chain-1200", include_case("chain-1200"), (E, 2, "t.yaml", "include", "deeper than")),
    ("include-cycle", include_case("cycle"), (E, 2, "t.yaml", "include", "itself")),
    ("include-fifo", include_case("fifo"), (E, 2, "t.yaml", "include", "FIFO")),
    ("include-dev-zero", include_case("dev-zero"), (E, 2, "t.yaml", "include", "character device")),
    ("include-symlink-loop", include_case("loop"), (E, 2, "t.yaml", "include", "loop")),
    ("include-dangling", include_case("dangling"), (E, 2, "t.yaml", "include", "does not exist")),
    ("include-folder", include_case("folder"), (E, 2, "t.yaml", "include", "folder")),
    ("include-huge", include_case("huge"), (E, 2, "t.yaml", "include", "MiB")),
    ("include-alias-bomb", include_case("alias-bomb"), (E, 2, "t.yaml", "include", "alias")),
    ("include-not-a-name", include_case("not-a-name"), (E, 2, "t.yaml", "include")),
    ("include-ok", include_case("ok"), (OK, "results:")),
]


# -- special files and links as the paths the harness reads and writes -------------------------------


def special(c: Ctx, name: str, kind: str) -> Path:
    """`name` under the case folder made into a FIFO, a symlink loop, a dangling link, a link to
    /dev/zero or /dev/null, a folder, or a 2 MiB file."""
    p = c.tmp / name
    p.parent.mkdir(parents=True, exist_ok=True)
    if kind == "fifo":
        os.mkfifo(p)
    elif kind == "loop":
        p.symlink_to(p)
    elif kind == "loop2":
        (c.tmp / f"{name}.other").symlink_to(p)
        p.symlink_to(c.tmp / f"{name}.other")
    elif kind == "dangling":
        p.symlink_to(c.tmp / "missing-target")
    elif kind in ("zero", "null"):
        p.symlink_to(f"/dev/{kind}")
    elif kind == "folder":
        p.mkdir()
    elif kind == "huge":
        p.write_text("model: random\n#" + "x" * (2 << 20) + "\n")
    return p


def config_case(kind: str):
    def go(c: Ctx) -> Outcome:
        if kind == "dev-zero":
            return harness("--config", "/dev/zero")
        p = special(c, "run.yaml", kind)
        return harness("--config", str(p))

    return go


def include_path_case(kind: str):
    def go(c: Ctx) -> Outcome:
        if kind in ("task-fifo", "task-loop", "task-dangling", "task-zero"):
            d = lm_task(c)
            special(c, f"tasks/x_{kind}.yaml", kind.split("-")[1])
            return run(c, "--include_path", str(d), tasks="roles_lm")
        p = special(c, "inc", kind)
        return run(c, "--include_path", str(p))

    return go


def output_case(flag: str, kind: str):
    def go(c: Ctx) -> Outcome:
        p = special(c, "out" if flag == "--output_path" else "cache.sqlite", kind)
        if flag == "--output_path":
            return run(c, out=p)
        return run(c, "--cache", str(p))

    return go


def dataset_case(kind: str):
    def go(c: Ctx) -> Outcome:
        return run(c, ds=special(c, "ds", kind))

    return go


def validate_case(kind: str):
    def go(c: Ctx) -> Outcome:
        return harness("validate", str(special(c, "v.yaml", kind)))

    return go


def ls_case(kind: str):
    def go(c: Ctx) -> Outcome:
        return harness("ls", "tasks", "--include_path", str(special(c, "inc", kind)))

    return go


def output_link_ok(c: Ctx) -> Outcome:
    real = c.tmp / "real"
    real.mkdir()
    (c.tmp / "link").symlink_to(real)
    o = run(c, out=c.tmp / "link")
    if o.code == 0 and not list(real.glob("*/casu_results_*.json")):
        return Outcome(1, o.out + "\nLOST: no results in the link's target")
    return o


def scenarios_case(kind: str):
    def go(c: Ctx) -> Outcome:
        from bad_input_corpus import casu

        p = special(c, "lib", kind)
        return casu("build", "--scenarios", str(p), "--out", str(c.tmp / "built"))

    return go


def table_case(kind: str):
    def go(c: Ctx) -> Outcome:
        if kind == "results-fifo":  # a complete run, and a FIFO under a results file's name beside it
            o = run(c)
            if o.code != 0:
                return o
            (model_dir,) = [d for d in (c.tmp / "res").iterdir() if d.is_dir()]
            os.mkfifo(model_dir / "casu_results_2000-01-01T00-00-00.json")
            return harness("table", str(c.tmp / "res"))
        return harness("table", str(special(c, "res", kind)))

    return go


PATH_CASES = [
    (
        "table-results-fifo",
        table_case("results-fifo"),
        (SKIP, "casu_results_2000-01-01T00-00-00.json", "FIFO"),
    ),
    ("table-folder-loop", table_case("loop"), (E, 2, "res", "loop")),
    ("table-folder-fifo", table_case("fifo"), (E, 2, "res", "FIFO")),
    *(
        (f"config-{k}", config_case(k), (E, 2, "--config", why))
        for k, why in (
            ("fifo", "FIFO"),
            ("loop", "loop"),
            ("loop2", "loop"),
            ("dangling", "does not exist"),
            ("dev-zero", "character device"),
            ("zero", "character device"),
            ("null", "character device"),
            ("folder", "folder"),
            ("huge", "MiB"),
        )
    ),
    *(
        (f"include-path-{k}", include_path_case(k), (E, 2, "--include_path", why))
        for k, why in (("loop", "loop"), ("fifo", "FIFO"), ("dangling", "does not exist"), ("null", "device"))
    ),
    *(  # a task file that fails is skipped, named, and the other tasks run (lm-eval's habit)
        (f"include-path-{k}", include_path_case(k), (SKIP, f"x_{k}.yaml", why, "results:"))
        for k, why in (
            ("task-fifo", "FIFO"),
            ("task-loop", "loop"),
            ("task-dangling", "does not exist"),
            ("task-zero", "device"),
        )
    ),
    *(
        (f"output-path-{k}", output_case("--output_path", k), (E, 2, "--output_path", why))
        for k, why in (
            ("loop", "loop"),
            ("loop2", "loop"),
            ("dangling", "missing-target"),
            ("fifo", "FIFO"),
            ("null", "/dev/null"),
        )
    ),
    *(
        (f"cache-{k}", output_case("--cache", k), (E, 2, "--cache", why))
        for k, why in (("loop", "loop"), ("dangling", "missing-target"), ("fifo", "FIFO"), ("null", "device"))
    ),
    *(
        (f"dataset-{k}", dataset_case(k), (E, 2, "--dataset", why))
        for k, why in (("loop", "loop"), ("fifo", "FIFO"), ("dangling", "does not exist"))
    ),
    *(
        (f"validate-{k}", validate_case(k), (E, 2, "v.yaml", why))
        for k, why in (("fifo", "FIFO"), ("loop", "loop"), ("zero", "device"))
    ),
    *((f"ls-include-path-{k}", ls_case(k), (E, 2, "--include_path", "loop")) for k in ("loop",)),
    ("output-path-link-to-folder", output_link_ok, (OK, "results:")),
    *(
        (f"scenarios-{k}", scenarios_case(k), (E, 2, "--scenarios", why))
        for k, why in (("fifo", "FIFO"), ("loop", "loop"), ("dangling", "does not exist"))
    ),
]


# -- --config contents and the environment --------------------------------------------------------


def config_text(text: str, *argv):
    def go(c: Ctx) -> Outcome:
        p = c.tmp / "run.yaml"
        p.write_text(text.replace("DS", str(c.ds)).replace("OUT", str(c.tmp / "res")))
        return harness("--config", str(p), *argv)

    return go


BASE = "model: random\ndataset: DS\noutput_path: OUT\nno_probe: true\nquiet: true\n"


def env_case(env: dict, *argv, model="random"):
    def go(c: Ctx) -> Outcome:
        with environment(env):
            return run(c, *argv, model=model)

    return go


def whisper_folder(c: Ctx) -> Outcome:
    empty = c.tmp / "not-a-model"
    empty.mkdir()
    return env_case({"CASU_WHISPER_MODEL": str(empty)}, "--cache", "off", model="cascade")(c)


def ascii_write_out(c: Ctx) -> Outcome:
    """--write_out with stdout and stderr in ASCII (PYTHONIOENCODING=ascii) and a question that is not."""
    import io

    from conftest import tiny_dataset

    ds = tiny_dataset(c.tmp / "uni", 2, "ünï—☃")
    saved = sys.stdout, sys.stderr
    sys.stdout = io.TextIOWrapper(io.BytesIO(), encoding="ascii")
    sys.stderr = io.TextIOWrapper(io.BytesIO(), encoding="ascii")
    try:
        from harness.cli.main import main

        code = main(harness_argv(ds, c.tmp / "res", "--write_out"))
        text = ""
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
            text += stream.buffer.getvalue().decode("ascii")
    except Exception:  # noqa: BLE001 - a UnicodeEncodeError is what this case counts
        import traceback

        return Outcome(None, "", traceback.format_exc())
    finally:
        sys.stdout, sys.stderr = saved
    if code == 0 and "first prompt" not in text:
        return Outcome(1, text + "\nLOST: --write_out printed no prompt")
    return Outcome(code, text)


CONFIG_CASES = [
    (
        "config-tasks-nested-list",
        config_text(BASE + "tasks: [[role_inference]]\n"),
        (E, 2, "--tasks", "item 1"),
    ),
    ("config-tasks-mapping", config_text(BASE + "tasks: {a: 1}\n"), (E, 2, "--tasks")),
    ("config-tasks-int", config_text(BASE + "tasks: 3\n"), (E, 2, "--tasks")),
    ("config-alias-bomb", config_text(alias_bomb() + BASE), (E, 2, "--config", "alias")),
    (
        "config-alias-bomb-tasks",
        config_text(BASE + "tasks: " + alias_bomb().replace("\n", " ")),
        (E, 2, "--config"),
    ),
    ("config-key-int", config_text(BASE + "1: x\n"), (E, 2, "--config", "unknown key")),
    ("config-key-list", config_text(BASE + "? [a]\n: x\n"), (E, 2, "--config")),
    (
        "config-conditions-nested",
        config_text(BASE + "tasks: role_inference\nconditions: [[full]]\n"),
        (E, 2, "--conditions"),
    ),
    (
        "config-include-path-nested",
        config_text(BASE + "tasks: role_inference\ninclude_path: [[x]]\n"),
        (E, 2, "--include_path"),
    ),
    ("config-limit-list", config_text(BASE + "tasks: role_inference\nlimit: [1]\n"), (E, 2, "limit")),
    ("config-model-list", config_text(BASE + "tasks: role_inference\nmodel: [random]\n"), (E, 2, "model")),
    ("config-deep-nesting", config_text(BASE + "tasks: " + "[" * 3000 + "]" * 3000 + "\n"), (E, 2, "--")),
    (
        "config-not-utf8",
        lambda c: (
            (c.tmp / "r.yaml").write_bytes(b"model: \xff\xfe\n")
            and harness("--config", str(c.tmp / "r.yaml"))
        ),
        (E, 2, "--config", "UTF-8"),
    ),
    ("config-ok", config_text(BASE + "tasks: [role_inference]\n"), (OK, "results:")),
    ("env-world-size-abc", env_case({"WORLD_SIZE": "abc"}), (E, 2, "WORLD_SIZE")),
    ("env-world-size-2-no-launcher", env_case({"WORLD_SIZE": "2"}), (E, 2, "WORLD_SIZE=2", "launcher")),
    ("env-world-size-0", env_case({"WORLD_SIZE": "0"}), (E, 2, "WORLD_SIZE")),
    ("env-world-size-huge", env_case({"WORLD_SIZE": "9" * 5000}), (E, 2, "WORLD_SIZE")),
    ("env-rank-junk", env_case({"RANK": "x1"}), (E, 2, "RANK")),
    ("env-local-rank-negative", env_case({"LOCAL_RANK": "-1"}), (E, 2, "LOCAL_RANK")),
    (
        "env-rank-outside",
        env_case({"WORLD_SIZE": "2", "RANK": "5", "MASTER_ADDR": "127.0.0.1"}),
        (E, 2, "RANK=5"),
    ),
    ("env-world-size-1-ok", env_case({"WORLD_SIZE": "1", "RANK": "0", "LOCAL_RANK": "0"}), (OK, "results:")),
    ("env-pythonioencoding-ascii-write-out", ascii_write_out, (OK, "first prompt")),
    ("env-whisper-not-a-model", whisper_folder, (E, 3, "CASU_WHISPER_MODEL", "not-a-model")),
    (
        "env-whisper-missing",
        lambda c: env_case({"CASU_WHISPER_MODEL": str(c.tmp / "nope")}, "--cache", "off", model="cascade")(c),
        (E, 3, "Whisper", "nope"),
    ),
]


# -- adapters that return the wrong things -------------------------------------------------------------

ADAPTER_CASES = [
    (
        f"adapter-{name}",
        lambda c, n=name: run(c, "--cache", "off", model=f"bad_adapters:{n}"),
        (E, 4, name_shown, "failed", "b_scene"),
    )
    for name, name_shown in (
        ("IntTexts", "int-texts"),
        ("NoneTexts", "none-texts"),
        ("ShortTexts", "short-texts"),
        ("BytesTexts", "bytes-texts"),
        ("IntScores", "int-scores"),
        ("ShortScores", "short-scores"),
        ("TextScores", "text-scores"),
    )
]


# -- signals and concurrent runs (real processes) -----------------------------------------------------


def fork_main(argv: list[str], log: Path, env: dict | None = None) -> int:
    """`python -m harness ARGV` in a forked process (the imports are already done, so four of them
    start at once in a second), its stdout and stderr into `log`; returns its pid."""
    pid = os.fork()
    if pid == 0:  # the child: never returns to pytest
        code = 99
        try:
            fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(fd, 1)
            os.dup2(fd, 2)
            sys.stdout = open(1, "w", closefd=False, buffering=1)  # noqa: SIM115
            sys.stderr = open(2, "w", closefd=False, buffering=1)  # noqa: SIM115
            os.environ.update(env or {})
            from harness.cli.main import main

            code = main(argv)
        except BaseException:  # noqa: BLE001 - a traceback is what the case counts
            import traceback

            traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    return pid


def wait_pid(pid: int, timeout: float) -> int | None:
    """The exit code of a forked child, or None (killed) when it runs past `timeout`."""
    t0 = time.time()
    while time.time() - t0 < timeout:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.02)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    return None


def stopped(sig: int):
    def go(c: Ctx) -> Outcome:
        started = c.tmp / "started"
        out = c.tmp / "res"
        argv = harness_argv(c.ds, out, "--model_args", "delay=0.3", model="bad_adapters:Slow")
        log = c.tmp / "log"
        pid = fork_main(argv, log, {"CASU_TEST_STARTED": str(started)})
        t0 = time.time()
        while not started.exists() and time.time() - t0 < CASE_S:
            time.sleep(0.02)
        time.sleep(0.7)  # two answers in: they must be kept
        os.kill(pid, sig)
        code = wait_pid(pid, CASE_S)
        text = log.read_text()
        if code is None:
            return Outcome(0, text + "\nHANG: the run did not stop on the signal")
        if list(out.glob("*/casu_results_*.json")) or list(out.glob("*/results_*.json")):
            return Outcome(code if code else 1, text + "\nLOST: a results file was written by a stopped run")
        kept = _cached(out / "cache.sqlite")
        if code in (130, 143) and kept == 0:
            return Outcome(code, text + "\nLOST: the answers received were not kept in the cache")
        lines = [ln for ln in text.splitlines() if ln.strip()]
        if code in (130, 143) and len(lines) != 1:
            return Outcome(code, text + f"\nUNNAMED: {len(lines)} lines, not one")
        return Outcome(code, text)

    return go


def _cached(db: Path) -> int:
    import sqlite3

    if not db.exists():
        return 0
    with sqlite3.connect(db) as con:
        tables = [r[0] for r in con.execute("select name from sqlite_master where type='table'")]
        return sum(con.execute(f"select count(*) from {t}").fetchone()[0] for t in tables)


def concurrent_runs(c: Ctx) -> Outcome:
    """Four runs started at once into one --output_path: four results files, none shared, each
    holding its own run (its seed)."""
    import json

    out = c.tmp / "res"
    argv = harness_argv(c.ds, out, "--log_samples")
    pids = [fork_main([*argv, "--seed", str(i)], c.tmp / f"log{i}") for i in range(4)]
    codes = [wait_pid(pid, 60) for pid in pids]
    texts = [(c.tmp / f"log{i}").read_text() for i in range(4)]
    text = "\n".join(texts)
    if None in codes:
        return Outcome(0, text + "\nHANG: a concurrent run did not finish")
    if any(codes):
        return Outcome(next(x for x in codes if x), text)
    named = [ln.split()[1] for t in texts for ln in t.splitlines() if ln.startswith("results: ")]
    files = sorted(out.glob("*/casu_results_*.json"))
    if len(set(named)) != 4 or len(files) != 4:
        return Outcome(1, text + f"\nSHARED: printed {named}, on disk {[f.name for f in files]}")
    seeds = sorted(json.loads(f.read_text())["config"]["seed"] for f in files)
    if seeds != [0, 1, 2, 3]:
        return Outcome(1, text + f"\nLOST: the files hold seeds {seeds}, not each run's own")
    return Outcome(0, text)


PROCESS_CASES = [
    ("signal-sigint", stopped(signal.SIGINT), (E, 130, "stopped by", "cache")),
    ("signal-sigterm", stopped(signal.SIGTERM), (E, 143, "stopped by SIGTERM", "cache")),
    ("concurrent-4-runs", concurrent_runs, (OK,)),
]

PROCESS_IDS = {c[0] for c in PROCESS_CASES}
CASES = [*TEMPLATE_CASES, *INCLUDE_CASES, *PATH_CASES, *CONFIG_CASES, *ADAPTER_CASES, *PROCESS_CASES]


def test_case_ids_are_unique():
    assert duplicate_ids(CASES) == []
    assert len(CASES) >= 100


@pytest.fixture(scope="module")
def round4_ctx(tmp_path_factory):
    from conftest import tiny_dataset

    root = tmp_path_factory.mktemp("round4")
    return Ctx(root, tiny_dataset(root / "ds", 3, "b"))


def verdict(o: Outcome, expect) -> tuple[str, str]:
    """classify(), plus the verdicts this corpus adds: HANG (past the case's time), LOST (results
    missing, shared or written half), and a named line must be one line (no traceback)."""
    if "HANG:" in o.text:
        return "HANG", o.text[-800:]
    if "LOST:" in o.text or "SHARED:" in o.text:
        return "SILENT", o.text[-1500:]
    if "UNNAMED:" in o.text:
        return "UNNAMED", o.text[-800:]
    return classify(o, expect)


@pytest.mark.parametrize("case_id, go, expect", CASES, ids=[c[0] for c in CASES])
def test_round4(round4_ctx, tmp_path, case_id, go, expect):
    round4_ctx.tmp = tmp_path
    t0 = time.perf_counter()
    v, detail = verdict(go(round4_ctx), expect)
    took = time.perf_counter() - t0
    assert v in ("named", "ok", "skip"), f"{v}: {case_id}: {detail}"
    assert took < (120 if case_id in PROCESS_IDS else CASE_S), f"HANG: {case_id} took {took:.1f} s"


# -- the measurement: every case in its own forked process, with a hard timeout -------------------------


def _measure(ctx: Ctx, root: Path, timeout: float) -> dict[str, list[str]]:
    import json
    import multiprocessing as mp

    fork = mp.get_context("fork")
    table: dict[str, list[str]] = {k: [] for k in ("TRACEBACK", "SILENT", "UNNAMED", "HANG", "handled")}
    only = {x for x in os.environ.get("CASU_MEASURE_CASES", "").split(",") if x}
    for i, (case_id, go, expect) in enumerate(CASES):
        if only and case_id not in only:
            continue
        tmp = root / f"c{i}"
        tmp.mkdir()
        parent, child = fork.Pipe(duplex=False)

        def work(go=go, expect=expect, tmp=tmp, child=child):
            import resource

            # a case that would take the machine's memory (the code measured may compute
            # 9**(9**9) or [1, 2] * 10**9) fails alone: 3 GiB more address space than the fork has
            vsz = int(Path("/proc/self/statm").read_text().split()[0]) * os.sysconf("SC_PAGE_SIZE")
            resource.setrlimit(resource.RLIMIT_AS, (vsz + (3 << 30), resource.RLIM_INFINITY))
            ctx.tmp = tmp
            try:
                o = go(ctx)
                child.send(list(verdict(o, expect)))
            except BaseException as err:  # noqa: BLE001 - counted
                child.send(["TRACEBACK", repr(err)])

        p = fork.Process(target=work)
        t0 = time.time()
        p.start()
        got = parent.recv() if parent.poll(timeout) else ["HANG", f"no answer in {timeout} s"]
        if p.is_alive():
            p.kill()
        p.join()
        v = got[0] if got[0] in table else "handled"
        table[v].append(case_id)
        print(
            json.dumps(
                {"case": case_id, "verdict": v, "s": round(time.time() - t0, 2), "detail": got[1][-300:]}
            )
        )
        sys.stdout.flush()
    return table


if __name__ == "__main__":
    import importlib
    import tempfile

    sys.path.insert(0, str(HERE))
    from conftest import tiny_dataset

    import harness as measured  # not `harness`: that name is this module's CLI helper

    print(f"# measuring {measured.__file__}", file=sys.stderr)
    timeout = float(os.environ.get("CASU_MEASURE_TIMEOUT", "30"))
    root = Path(tempfile.mkdtemp(prefix="round4-"))
    importlib.import_module("harness.api")  # imported once, before the forks

    ctx = Ctx(root, tiny_dataset(root / "ds", 3, "b"))
    ctx.tmp = root / "warm"
    print(f"# warm-up run: exit {run(ctx).code}", file=sys.stderr)  # every module imported once
    table = _measure(ctx, root, timeout)
    print("| verdict | cases |")
    print("|---|---|")
    for k, v in table.items():
        print(f"| {k} | {len(v)} |")
    for k, v in table.items():
        if k != "handled" and v:
            print(f"{k}: {', '.join(v)}")


# -- the sandbox's budget, measured; the stamp claim under a race ----------------------------------------


@pytest.mark.parametrize("case_id", sorted(TEMPLATE_TEXTS))
def test_an_attack_template_is_refused_well_under_a_second(case_id):
    """Each attack of the corpus, rendered directly over a row: one LmEvalYamlError line, in well
    under a second (the budget is 0.25 s; the loop and size checks stop most far sooner)."""
    from harness.task import lmeval_yaml

    template = TEMPLATE_TEXTS[case_id]
    doc = {"question": "Who speaks?", "options": ["w", "x", "y", "z"], "answer": "A", "hint": ""}
    t0 = time.perf_counter()
    with pytest.raises(lmeval_yaml.LmEvalYamlError) as err:
        lmeval_yaml.check_template(template, "doc_to_text")
        lmeval_yaml.render(template, doc, "doc_to_text")
    took = time.perf_counter() - t0
    assert "\n" not in str(err.value) and str(err.value).startswith("doc_to_text: ")
    assert took < 0.6, f"{case_id}: {took:.2f} s"


def test_runs_racing_for_one_stamp_each_claim_their_own(tmp_path):
    """Eight processes claiming the same date's stamp in one folder at once: eight stamps."""
    import multiprocessing as mp

    from harness.output.files import claimed_stamp

    d = tmp_path / "m"
    d.mkdir()

    def taken(stamp):
        return (d / f"casu_results_{stamp}.json").exists()

    def claim(q):
        with claimed_stamp(d, "2026-01-01T00-00-00", taken) as stamp:
            time.sleep(0.2)  # hold it while the others try
            (d / f"casu_results_{stamp}.json").write_text("{}")
        q.put(stamp)

    ctx = mp.get_context("fork")
    q = ctx.Queue()
    ps = [ctx.Process(target=claim, args=(q,)) for _ in range(8)]
    for p in ps:
        p.start()
    for p in ps:
        p.join(30)
    stamps = sorted(q.get(timeout=5) for _ in ps)
    assert len(set(stamps)) == 8, stamps
    assert not list(d.glob(".claim-*"))  # released
