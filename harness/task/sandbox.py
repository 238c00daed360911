"""The Jinja sandbox an lm-eval-style task's templates render in (task/lmeval_yaml.py).

A task file is input, and its templates run once per row before any model loads, so a template
must not be able to read files, run forever or fill the memory:

- no loader: `{% include %}`, `{% extends %}`, `{% import %}` and `{% from ... import %}` are
  refused by name when the template is parsed;
- every render has a budget: RENDER_SECONDS of wall time, checked at every loop iteration, call,
  operator and output chunk (loops iterate through a guard the parser puts around each `for`), and
  OUTPUT_CHARS of text (the rendered text, and any string, list or `~` concatenation on the way);
- `range` is capped at RANGE_ITEMS items; `**`, `*`, `+`, `%` and the amplifying filters and
  string methods (`center`, `replace`, `join`, `format`, ...) are checked before they run, so
  `9**9**9` or `'x' * 10**12` is refused instead of computed;
- calls (macros included) nest at most CALL_DEPTH deep, so a recursive macro is named instead of
  ending in RecursionError.

Each refusal is a `SandboxError` whose message says which limit (the caller adds the file, field
and row)."""

from __future__ import annotations

import contextvars
import math
import re
import time
from functools import lru_cache
from typing import Any

from casu_dataset.core.errors import InputError

RENDER_SECONDS = 0.25  # wall time of one render (a row's prompt renders in ~0.1 ms)
OUTPUT_CHARS = 100_000  # a rendered field, and any string or list made on the way
RANGE_ITEMS = 10_000
CALL_DEPTH = 32  # nested calls: a recursive macro
INT_BITS = 4096  # an integer made by ** or * (a 1,233-digit number)
INT_ARG = 100_000  # an integer argument of a filter or method (a width, a count)
LOOP_GUARD = "__casu_loop__"
CONCAT_GUARD = "__casu_concat__"
REFUSED_TAGS = {
    "Include": "{% include %}",
    "Extends": "{% extends %}",
    "Import": "{% import %}",
    "FromImport": "{% from ... import %}",
}


class SandboxError(InputError, ValueError):
    """A template that reached a limit of the sandbox, or used a tag it refuses."""


class _Budget:
    __slots__ = ("deadline", "depth")

    def __init__(self, seconds: float):
        self.deadline = time.perf_counter() + seconds
        self.depth = 0

    def tick(self) -> None:
        if time.perf_counter() > self.deadline:
            raise SandboxError(
                f"the render ran past its budget of {RENDER_SECONDS} s (a loop or a computation too "
                "large for a prompt), so it was stopped"
            )


_BUDGET: contextvars.ContextVar[_Budget | None] = contextvars.ContextVar("casu_template_budget", default=None)


def _tick() -> None:
    b = _BUDGET.get()
    if b is not None:
        b.tick()


def _size(value: Any) -> int:
    return len(value) if isinstance(value, (str, list, tuple, dict, set, frozenset, bytes)) else 0


def _check_size(value: Any, what: str) -> None:
    n = _size(value)
    if n > OUTPUT_CHARS:
        raise SandboxError(
            f"{what} makes {n:,} items/characters; a template's values stay under {OUTPUT_CHARS:,}"
        )


def _too_big(n: float, what: str) -> None:
    if n > OUTPUT_CHARS:
        raise SandboxError(
            f"{what} would make about {int(min(n, 1e18)):,} characters/items; a template's values stay "
            f"under {OUTPUT_CHARS:,}"
        )


def _int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


_PERCENT_WIDTH = re.compile(r"%[^a-zA-Z%]*?(?:\d{6,}|\*)")
_BRACE_WIDTH = re.compile(r"\{[^{}]*:[^{}]*(?:\d{6,}|\{)")


def _check_format(fmt: Any, how: str) -> None:
    if isinstance(fmt, str) and (
        (how == "%" and _PERCENT_WIDTH.search(fmt)) or (how == "{}" and _BRACE_WIDTH.search(fmt))
    ):
        raise SandboxError(
            f"format string {fmt[:40]!r}: a width or precision of 100,000 or more (or one given as an "
            "argument) is refused"
        )


def _guarded_range(*args: Any) -> range:
    r = range(*args)
    try:
        n = len(r)
    except OverflowError:
        n = RANGE_ITEMS + 1
    if n > RANGE_ITEMS:
        shown = ", ".join(str(a) if not _int(a) or abs(a) < 10**12 else "a huge number" for a in args)
        raise SandboxError(
            f"range({shown}) has more than {RANGE_ITEMS:,} items; the sandbox caps range there"
        )
    return r


def _guarded_loop(iterable: Any):
    b = _BUDGET.get()
    for x in iterable:
        if b is not None:
            b.tick()
        yield x


def _guarded_concat(parts: Any) -> str:
    total = 0
    out = []
    for p in parts:
        s = str(p)
        total += len(s)
        _too_big(total, "`~` concatenation")
        out.append(s)
    return "".join(out)


def _check_args(obj: Any, args: tuple, kwargs: dict) -> None:
    """Refuse the calls whose cost an argument multiplies (a width, a count, a repeated text)."""
    from jinja2 import Undefined

    if isinstance(obj, Undefined):
        return  # calling it raises UndefinedError, which names the missing name
    obj = getattr(obj, "__wrapped__", obj)  # the sandbox wraps str.format
    values = [*args, *kwargs.values()]
    for v in values:
        if _int(v) and abs(v) > INT_ARG and obj is not _guarded_range:
            raise SandboxError(
                f"an argument of {abs(v):,} (more than {INT_ARG:,}) to {_name(obj)} is refused"
            )
        _check_size(v, f"an argument of {_name(obj)}")
    owner = getattr(obj, "__self__", None)
    name = getattr(obj, "__name__", "")
    if isinstance(owner, str):
        if name in ("format", "format_map"):
            _check_format(owner, "{}")
        elif name == "replace" and len(args) >= 2 and isinstance(args[0], str) and isinstance(args[1], str):
            count = len(owner) + 1 if not args[0] else owner.count(args[0])
            _too_big(len(owner) + count * len(args[1]), "str.replace")
        elif name == "join" and isinstance(args[0] if args else None, (list, tuple, str)):
            seq = args[0]
            _too_big(len(owner) * len(seq) + sum(_size(x) for x in seq), "str.join")


def _name(obj: Any) -> str:
    return getattr(obj, "__name__", None) or type(obj).__name__


def _filter_guard(name: str, fn):
    """A filter with its arguments checked (the value is checked where it was made) and its result
    bounded."""
    import functools

    from jinja2.utils import _PassArg

    passes = _PassArg.from_obj(fn) is not None

    @functools.wraps(fn)
    def guarded(*args, **kwargs):
        _tick()
        plain = args[1:] if passes else args  # a context or environment first: skipped
        value, extra = (plain[0] if plain else None), plain[1:]
        for v in [*extra, *kwargs.values()]:
            if _int(v) and abs(v) > INT_ARG:
                raise SandboxError(f"|{name}: an argument of {abs(v):,} (more than {INT_ARG:,}) is refused")
            _check_size(v, f"an argument of |{name}")
        if name == "format":
            _check_format(value, "%")
        elif name == "replace" and len(extra) >= 2 and isinstance(value, str):
            old, new = str(extra[0]), str(extra[1])
            _too_big(len(value) + (len(value) + 1 if not old else value.count(old)) * len(new), "|replace")
        elif name == "join" and isinstance(value, (list, tuple, str)):
            sep = str(extra[0]) if extra else str(kwargs.get("d", ""))
            _too_big(len(sep) * len(value) + sum(_size(x) for x in value), "|join")
        elif name == "indent" and isinstance(value, str):
            width = extra[0] if extra else kwargs.get("width", 4)
            w = len(width) if isinstance(width, str) else (width if _int(width) else 0)
            _too_big(len(value) + (value.count("\n") + 1) * w, "|indent")
        out = fn(*args, **kwargs)
        _check_size(out, f"|{name}")
        return out

    return guarded


@lru_cache(maxsize=1)
def environment():
    """The one sandboxed Jinja environment of task templates (undefined names are errors)."""
    from jinja2 import StrictUndefined, nodes
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class Sandbox(ImmutableSandboxedEnvironment):
        intercepted_binops = frozenset({"**", "*", "+", "%"})

        def _parse(self, source, name, filename):
            tree = super()._parse(source, name, filename)
            for kind, tag in REFUSED_TAGS.items():
                node = next(tree.find_all(getattr(nodes, kind)), None)
                if node is not None:
                    raise SandboxError(
                        f"{tag} (line {node.lineno}) is refused: a task template cannot read other "
                        "templates or files (there is no loader); write the text into this template"
                    )
            for loop in tree.find_all(nodes.For):
                loop.iter = nodes.Call(
                    nodes.Name(LOOP_GUARD, "load", lineno=loop.lineno),
                    [loop.iter],
                    [],
                    None,
                    None,
                    lineno=loop.lineno,
                )
            for parent in reversed([tree, *tree.find_all(nodes.Node)]):  # children first
                for field in parent.fields:
                    child = getattr(parent, field, None)
                    if isinstance(child, nodes.Concat):
                        setattr(parent, field, _concat_call(nodes, child))
                    elif isinstance(child, list):
                        setattr(
                            parent,
                            field,
                            [_concat_call(nodes, c) if isinstance(c, nodes.Concat) else c for c in child],
                        )
            tree.set_environment(self)
            return tree

        def call_binop(self, context, operator, left, right):
            _tick()
            if operator == "**" and _int(left) and _int(right) and abs(left) > 1 and right > 0:
                if right * math.log2(abs(left)) > INT_BITS:
                    big = "a huge number"
                    raise SandboxError(
                        f"{big if abs(left) > 10**12 else left} ** {big if right > 10**12 else right} "
                        f"has more than {INT_BITS} bits; refused"
                    )
            elif operator == "*":
                if _int(left) and _int(right):
                    if left.bit_length() + right.bit_length() > INT_BITS:
                        raise SandboxError(f"a product of more than {INT_BITS} bits is refused")
                elif _int(right) and _size(left):
                    _too_big(_size(left) * right, "`*` repetition")
                elif _int(left) and _size(right):
                    _too_big(_size(right) * left, "`*` repetition")
            elif operator == "+" and _size(left) and _size(right):
                _too_big(_size(left) + _size(right), "`+`")
            elif operator == "%" and isinstance(left, str):
                _check_format(left, "%")
            out = super().call_binop(context, operator, left, right)
            _check_size(out, f"`{operator}`")
            return out

        def call(__self, __context, __obj, *args, **kwargs):  # noqa: N805 - jinja's signature
            b = _BUDGET.get()
            if b is not None:
                b.tick()
                b.depth += 1
            try:
                if b is not None and b.depth > CALL_DEPTH:
                    raise SandboxError(
                        f"calls nested more than {CALL_DEPTH} deep (a macro that calls itself without end?)"
                    )
                _check_args(__obj, args, kwargs)
                out = super().call(__context, __obj, *args, **kwargs)
            finally:
                if b is not None:
                    b.depth -= 1
            _check_size(out, f"the call of {_name(__obj)}")
            return out

    env = Sandbox(undefined=StrictUndefined, keep_trailing_newline=False)
    env.globals.pop("lipsum", None)  # lipsum(n) writes n paragraphs: nothing a prompt needs
    env.globals["range"] = _guarded_range
    env.globals[LOOP_GUARD] = _guarded_loop
    env.globals[CONCAT_GUARD] = _guarded_concat
    env.filters = {k: _filter_guard(k, f) for k, f in env.filters.items()}
    return env


def _concat_call(nodes, concat):
    """`a ~ b ~ c` as a call of the bounded concatenation."""
    return nodes.Call(
        nodes.Name(CONCAT_GUARD, "load", lineno=concat.lineno),
        [nodes.List(concat.nodes, lineno=concat.lineno)],
        [],
        None,
        None,
        lineno=concat.lineno,
    )


@lru_cache(maxsize=256)
def compiled(text: str):
    """A template compiled once (rows render it many times)."""
    return environment().from_string(text)


def parse(text: str) -> None:
    """Parse a template (TemplateSyntaxError, or SandboxError for a refused tag)."""
    environment().parse(text)


def render(text: str, doc: dict) -> str:
    """Render a template over `doc` within the budget: SandboxError when a limit is reached; the
    template's own errors (jinja2's, or the Python error of an operation) pass through."""
    template = compiled(text)
    budget = _Budget(RENDER_SECONDS)
    token = _BUDGET.set(budget)
    try:
        out: list[str] = []
        size = 0
        for chunk in template.generate(**doc):
            size += len(chunk)
            if size > OUTPUT_CHARS:
                raise SandboxError(f"renders more than {OUTPUT_CHARS:,} characters; refused")
            budget.tick()
            out.append(chunk)
        return "".join(out)
    finally:
        _BUDGET.reset(token)
