"""YAML that means what it looks like: the profile file reader.

PyYAML's SafeLoader speaks YAML 1.1: a repeated key silently wins, `010` is 8, `1:30` is 90,
`yes`/`no`/`on`/`off` are booleans and a nested-alias "billion laughs" document expands to
more nodes than memory holds. StrictLoader refuses each of those, naming the file, the line
and the fix: a duplicate key, a plain scalar whose YAML 1.1 and 1.2 readings differ (quote it
to mean the text, or write the number plainly), and a document that expands to more than
MAX_NODES nodes through aliases. `true`/`false`, decimal and `0x` integers and floats keep
their meaning.
"""

from __future__ import annotations

import re
from typing import Any

import yaml
from yaml.constructor import ConstructorError
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

#: Nodes a profile may expand to through aliases: far above any real profile (a few hundred).
MAX_NODES = 20_000
_AMBIGUOUS_TAG = "tag:gpunode,2026:ambiguous"
#: Plain scalars YAML 1.1 (PyYAML) and YAML 1.2 read differently: leading-zero and 0o octal,
#: 0b binary, '_' digit groups, base-60 (1:30), and the 1.1-only booleans.
_AMBIGUOUS = re.compile(
    r"""^(?:[-+]?0[0-9_]+(?:\.[0-9_]*)?
    |[-+]?0o[0-7_]+|[-+]?0b[01_]+
    |[-+]?[0-9][0-9]*_[0-9_]*(?:\.[0-9_]*)?
    |[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+(?:\.[0-9_]*)?
    |yes|Yes|YES|no|No|NO|on|On|ON|off|Off|OFF|y|Y|n|N)$""",
    re.X,
)
_BOOL_12 = re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$")
_INT_12 = re.compile(r"^(?:[-+]?(?:0|[1-9][0-9]*)|0x[0-9a-fA-F]+)$")
_RESOLVED_ELSEWHERE = {"tag:yaml.org,2002:bool", "tag:yaml.org,2002:int"}


class StrictLoader(yaml.SafeLoader):
    """SafeLoader without duplicate keys, YAML 1.1-only scalars or alias bombs."""

    yaml_implicit_resolvers = {
        first: [(tag, rx) for tag, rx in resolvers if tag not in _RESOLVED_ELSEWHERE]
        for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
    }

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            line = key_node.start_mark.line + 1
            if isinstance(key, (str, int, float, bool)) and key in seen:
                raise ConstructorError(
                    None, None,
                    f"key {key!r} appears twice (line {seen[key]} and line {line}): YAML keeps "
                    "only the last; merge the two into one",
                    key_node.start_mark,
                )
            if isinstance(key, (str, int, float, bool)):
                seen[key] = line
        return super().construct_mapping(node, deep=deep)

    def construct_ambiguous(self, node: ScalarNode) -> Any:
        raise ConstructorError(
            None, None,
            f"{node.value!r} (line {node.start_mark.line + 1}) reads differently in YAML 1.1 "
            "and 1.2 (octal, base 60, digit groups or yes/no/on/off): quote it to mean the "
            "text, write a plain decimal number, or true/false",
            node.start_mark,
        )


# The first characters each resolver may start with (PyYAML's index of implicit resolvers).
_DIGITS = list("-+0123456789")
for _first in [*_DIGITS, *"yYnNoO"]:  # ahead of the float resolver: '1:30.5', '1_0.5' too
    StrictLoader.yaml_implicit_resolvers.setdefault(_first, []).insert(
        0, (_AMBIGUOUS_TAG, _AMBIGUOUS))
StrictLoader.add_implicit_resolver("tag:yaml.org,2002:bool", _BOOL_12, list("tTfF"))
StrictLoader.add_implicit_resolver("tag:yaml.org,2002:int", _INT_12, _DIGITS)
StrictLoader.add_constructor(_AMBIGUOUS_TAG, StrictLoader.construct_ambiguous)


def expanded_size(node: Node, limit: int = MAX_NODES) -> int:
    """How many nodes the document expands to once aliases are copied; stops past `limit`.
    Each distinct node is sized once (aliases share the node object), so a bomb is measured
    in the time of its text, not of its expansion; a node inside itself counts as past it."""
    sizes: dict[int, int] = {}

    def size(current: Node) -> int:
        key = id(current)
        if key in sizes:
            return sizes[key]
        sizes[key] = limit + 1  # in progress: a node that holds itself is past any limit
        total = 1
        if isinstance(current, SequenceNode):
            children: list[Node] = list(current.value)
        elif isinstance(current, MappingNode):
            children = [part for pair in current.value for part in pair]
        else:
            children = []
        for child in children:
            total += size(child)
            if total > limit:
                break
        sizes[key] = min(total, limit + 1)
        return sizes[key]

    return size(node)


def load_strict_yaml(text: str, name: str) -> Any:
    """The one document in text, read by StrictLoader; yaml.YAMLError naming `name`."""
    loader = StrictLoader(text)
    loader.name = name
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        if expanded_size(node) > MAX_NODES:
            raise ConstructorError(
                None, None,
                f"expands to more than {MAX_NODES} values through aliases (*name): an alias "
                "bomb, or a profile that should not use anchors this way; write it out",
                node.start_mark,
            )
        return loader.construct_document(node)
    finally:
        loader.dispose()
