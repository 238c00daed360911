"""YAML as CASU reads it: safe, and strict about keys. PyYAML keeps the last of two equal keys in a
mapping without a word (a family with `q:` twice, a task with `description:` twice); here that is
an error naming the key and both lines. `.yml` files count as YAML wherever a folder is read."""

from __future__ import annotations

import hashlib
import io
import marshal
from pathlib import Path

import yaml

from casu_dataset.core import atomic, cache_layout
from casu_dataset.core.errors import InputError

SUFFIXES = (".yaml", ".yml")
LIBRARY_FILE_LIMIT = 256 << 20  # a family/scenario file; shipped ones are ~100 KB


class DuplicateKeyError(InputError, yaml.constructor.ConstructorError):
    """A mapping names one key twice; a yaml.YAMLError too, so every reader's YAML error path names
    it with its file."""


class _StrictLoader(yaml.SafeLoader):
    pass


def _mapping(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    first: dict = {}
    for key_node, _ in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":  # `<<:` merges are YAML's own override rule
            continue
        key = loader.construct_object(key_node, deep=deep)
        try:
            line = first.get(key)
        except TypeError:  # an unhashable key: SafeLoader names it below
            continue
        if line is not None:
            raise DuplicateKeyError(
                "while reading a mapping",
                node.start_mark,
                f"found the key {key!r} twice (first on line {line}): the second would silently win",
                key_node.start_mark,
            )
        first[key] = key_node.start_mark.line + 1
    return loader.construct_mapping(node, deep=deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping)

# libyaml's parser (~10x faster on the family library) with the same constructor and resolver, where
# PyYAML was built with it. Its error marks carry no snippet, so any error parses again with the
# pure-Python loader, whose message is what a user sees.
_FastLoader: type | None = None
if getattr(yaml, "__with_libyaml__", False):

    class _StrictCLoader(yaml.CSafeLoader):
        pass

    _StrictCLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping)
    _FastLoader = _StrictCLoader


class TooLargeError(InputError, yaml.YAMLError):
    """A document whose aliases expand to more values than the reader allows (an alias bomb)."""


def _expanded(node, limit: int) -> int:
    """How many values a composed YAML node stands for once its aliases are expanded (shared nodes
    counted each time they are used, as the loaded object repeats them); stops past `limit`."""
    memo: dict[int, int] = {}

    def size(n) -> int:
        key = id(n)
        if key in memo:
            return memo[key]
        memo[key] = 1  # a recursive alias counts once
        total = 1
        if isinstance(n, yaml.SequenceNode):
            for child in n.value:
                total += size(child)
                if total > limit:
                    break
        elif isinstance(n, yaml.MappingNode):
            for k, v in n.value:
                total += size(k) + size(v)
                if total > limit:
                    break
        memo[key] = total
        return total

    return size(node)


def safe_load(text: str, name: str | Path | None = None, max_nodes: int | None = None):
    """`yaml.safe_load`, refusing a key given twice in one mapping (DuplicateKeyError); `name` (the
    file) is what error marks show instead of "<unicode string>". With `max_nodes`, a document that
    expands (aliases included) to more values is refused before it is built (TooLargeError)."""
    if _FastLoader is not None:
        try:
            return _load(_FastLoader, text, name, max_nodes)
        except Exception:  # noqa: BLE001  (the pure loader fails it again, with its snippet)
            pass
    return _load(_StrictLoader, text, name, max_nodes)


# A library file as parsed, memoised on disk: the family library's ~1 MB of YAML takes ~0.2 s to
# parse (libyaml included) in every build, test and command that compiles it; its marshal, ~10 ms.
PARSED_VERSION = 1  # bump whenever what safe_load returns for a text changes (the constructors)
_DIGEST = 32  # an entry: the sha256 of its payload, then the payload (marshal of the value)


def _parsed_path(text: str, cache_dir: str | Path | None) -> Path:
    key = hashlib.sha256(f"{PARSED_VERSION}\0{yaml.__version__}\0{text}".encode("utf-8", "surrogatepass"))
    return cache_layout.parsed_yaml_dir(cache_dir) / f"{key.hexdigest()[:40]}.marshal"


def load_library_text(text: str, name: str | Path | None = None, cache_dir: str | Path | None = None):
    """safe_load(text, name), memoised in cache_layout.parsed_yaml_dir(cache_dir) under the sha256
    of the text (with PyYAML's version and PARSED_VERSION). A hit is the value parsing gives: marshal
    keeps every type YAML's safe loader makes but timestamps, the order of keys and the sharing of
    aliased values. Errors are not memoised (each read raises them anew, with the file's name);
    a value marshal cannot hold (a YAML timestamp) is parsed each time; an entry that cannot be
    read, fails its checksum or cannot be written costs only the parse."""
    path = _parsed_path(text, cache_dir)
    try:
        blob = path.read_bytes()
        if hashlib.sha256(blob[_DIGEST:]).digest() == blob[:_DIGEST]:
            return marshal.loads(blob[_DIGEST:])
    except (OSError, EOFError, ValueError, TypeError):
        pass
    data = safe_load(text, name)
    try:
        payload = marshal.dumps(data, 4)
    except ValueError:  # a timestamp (or a recursive alias): not memoised
        return data
    try:
        atomic.write_bytes(path, hashlib.sha256(payload).digest() + payload)
    except OSError:  # a read-only or full cache: the parse stands
        pass
    return data


def _load(loader_class, text: str, name: str | Path | None, max_nodes: int | None):
    stream = io.StringIO(text)
    stream.name = str(name) if name else "<text>"  # type: ignore[misc]  # read by yaml's marks
    loader = loader_class(stream)  # as yaml.load, with the node graph measured before it is built
    try:
        if max_nodes is None:
            return loader.get_single_data()
        node = loader.get_single_node()
        if node is None:
            return None
        if _expanded(node, max_nodes) > max_nodes:
            raise TooLargeError(
                f"its aliases expand to more than {max_nodes:,} values (an alias bomb?); write the values out"
            )
        return loader.construct_document(node)
    finally:
        loader.dispose()


def yaml_files(folder: Path) -> list[Path]:
    """The YAML files of a folder (`.yaml` and `.yml`), sorted by name. An entry with a YAML name
    that is not a regular file (a FIFO would block the read; a dangling link or a loop cannot be
    read) is named, not skipped: leaving it out would build a smaller library without a word."""
    from casu_dataset.core.paths import input_path

    found = sorted(p for p in Path(folder).iterdir() if p.suffix in SUFFIXES)
    for p in found:
        input_path(p, str(p), "file")
    return found


def read_library_file(path: Path) -> str:
    """A library file's text, read with the input-path checks (a FIFO or device is named, never
    waited on); a generated library may be large, so no size cap beyond LIBRARY_FILE_LIMIT."""
    from casu_dataset.core.paths import read_text

    return read_text(path, str(path), limit=LIBRARY_FILE_LIMIT)
