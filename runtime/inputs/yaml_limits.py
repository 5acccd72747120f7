"""YAML read with limits: size, UTF-8, nesting depth, alias expansion, duplicate keys.

The file is first walked as an event stream (no recursion, no objects built): the
depth of nested collections and the size the document would have with every alias
expanded are counted there, so a "billion laughs" document or ten thousand nested
brackets are refused before PyYAML's recursive composer sees them. Only then is the
document built, by a safe loader that refuses a key given twice in one mapping (YAML
would keep the last silently).
"""

from __future__ import annotations

from dataclasses import dataclass

import yaml
from yaml.events import AliasEvent, CollectionEndEvent, CollectionStartEvent, ScalarEvent

_Base = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's parser when installed


@dataclass(frozen=True)
class YamlLimits:
    max_bytes: int = 256 << 10  # run configs and recipes are a few KiB
    max_depth: int = 32  # nested mappings and lists (a run config uses 6)
    max_nodes: int = 20_000  # scalars and collections, aliases expanded


class YamlProblem(Exception):
    """What is wrong with a YAML text: `key` (if one is to blame), the message, the line."""

    def __init__(self, message: str, key=None, line: int | None = None):
        self.key, self.line = key, line
        super().__init__(message + (f" (line {line})" if line else ""))


class _DuplicateKey(yaml.constructor.ConstructorError):
    def __init__(self, key, first, again):
        self.key, self.first, self.again = key, first, again
        super().__init__(None, None, f"duplicate key {key!r}", again)


class _StrictLoader(_Base):
    """The safe loader, refusing a mapping that gives one key twice."""

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            seen = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge" or not isinstance(key_node, yaml.ScalarNode):
                    continue
                key = self.construct_object(key_node, deep=False)
                if key in seen:
                    raise _DuplicateKey(key, seen[key], key_node.start_mark.line + 1)
                seen[key] = key_node.start_mark.line + 1
        return super().construct_mapping(node, deep)


_StrictLoader.add_constructor("tag:yaml.org,2002:map", _StrictLoader.construct_yaml_map)


def decode_utf8(raw: bytes) -> str:
    """UTF-8 text (a BOM is dropped); anything else raises YamlProblem saying where it fails."""
    if raw.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise YamlProblem("is UTF-16 text; save it as UTF-8")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise YamlProblem(
            f"is not UTF-8 text: byte 0x{raw[exc.start]:02x} at offset {exc.start}; save it as UTF-8", line=line
        ) from None
    if "\x00" in text:
        raise YamlProblem("contains a NUL byte: not a text file", line=text[: text.index("\x00")].count("\n") + 1)
    return text.removeprefix("\ufeff")


def _check_events(text: str, limits: YamlLimits) -> None:
    """Depth and alias-expanded size of every document, from the event stream alone."""
    anchored: dict[str, int] = {}  # anchor -> expanded size of its node
    stack: list[list] = []  # open collections: [anchor, size so far]
    total = 0
    for event in yaml.parse(text, Loader=_Base):
        if isinstance(event, AliasEvent):
            size = anchored.get(event.anchor, 1)
        elif isinstance(event, ScalarEvent):
            size = 1
        elif isinstance(event, CollectionStartEvent):
            stack.append([event.anchor, 1])
            if len(stack) > limits.max_depth:
                raise YamlProblem(f"nests deeper than {limits.max_depth} levels", line=event.start_mark.line + 1)
            continue
        elif isinstance(event, CollectionEndEvent):
            anchor, size = stack.pop()
            if anchor is not None:
                anchored[anchor] = size
        else:
            continue
        if isinstance(event, ScalarEvent) and event.anchor is not None:
            anchored[event.anchor] = size
        if stack:
            stack[-1][1] += size
        else:
            total += size
        if total + sum(s for _, s in stack) > limits.max_nodes:
            raise YamlProblem(
                f"expands to more than {limits.max_nodes} values (aliases counted each time they are used)",
                line=event.start_mark.line + 1,
            )


def load_yaml(raw: bytes, limits: YamlLimits = YamlLimits()):
    """The document in `raw`, or YamlProblem. The caller has bounded len(raw) already."""
    if len(raw) > limits.max_bytes:
        raise YamlProblem(f"is {len(raw)} bytes, more than a config may be ({limits.max_bytes} bytes)")
    text = decode_utf8(raw)
    try:
        _check_events(text, limits)
        docs = list(yaml.load_all(text, Loader=_StrictLoader))
    except _DuplicateKey as exc:
        raise YamlProblem(
            f"is given twice (lines {exc.first} and {exc.again}); keep one", key=exc.key, line=None
        ) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        if "maximum nesting depth" in problem:
            # libyaml's scanner (PyYAML 6.0.4 on) looks ahead past brackets and stops at its
            # own depth limit before the event walk above reaches ours: the same finding
            raise YamlProblem(
                f"nests deeper than {limits.max_depth} levels", line=mark.line + 1 if mark else None
            ) from None
        if isinstance(exc, yaml.reader.ReaderError):
            char = exc.character if isinstance(exc.character, int) else ord(exc.character or "\0")
            problem = f"character U+{char:04X} is not allowed in YAML (position {exc.position})"
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise YamlProblem(f"malformed YAML{where}: {problem}") from None
    except (ValueError, OverflowError, TypeError, RecursionError) as exc:
        # e.g. a 5000-digit integer (Python's int parsing limit) or a bad timestamp
        raise YamlProblem(f"has a value YAML cannot read: {str(exc).splitlines()[0][:200]}") from None
    if len(docs) > 1:
        raise YamlProblem(f"holds {len(docs)} YAML documents (separated by ---); a config is one")
    return docs[0] if docs else None
