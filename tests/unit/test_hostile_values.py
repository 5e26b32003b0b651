"""Every string a user can give, walked from the schema, against hostile values.

The string-typed slots (plain strings, Literal strings, list items, dict keys and values) of
NodeProfile, ContainerSpec and ContainerSettings are found by introspection, nested models
included, so a new field is covered without touching this test. Each hostile value is either
refused before any host is touched, with an error naming host, field and value, or accepted
and rendered inert: every script and command line built from the profile passes `bash -n`,
and the value comes back from shlex.split inside one word.
"""

from __future__ import annotations

import shlex
import subprocess
import types
from typing import Any, Literal, Union, get_args, get_origin

import pytest
from pydantic import BaseModel

from gpunode.profile.container import ContainerSpec, ContainerSpecError, validate_containers
from gpunode.profile.loader import ProfileError, load_profile
from gpunode.profile.node import NodeProfile
from gpunode.roles.container.defaults import CONTAINER_DATA_KEY, ContainerSettings
from gpunode.roles.container.inventory import container_target
from gpunode.roles.lxc_gpu.validate import ContainerDeployError
from tests.unit.shell_render import container_shell, node_shell, settings_shell

HOSTILE = [
    "$(touch /tmp/gpunode-pwned)",
    "`touch /tmp/gpunode-pwned`",
    "a;touch /tmp/gpunode-pwned",
    "a|touch /tmp/gpunode-pwned",
    "a&touch /tmp/gpunode-pwned",
    "a && b",
    "a\ntouch /tmp/gpunode-pwned",
    "1\n",
    "'",
    '"',
    "a'b",
    'a"b',
    "-rf",
    "--help",
    "a b",
    "x" * 4096,
    "nvidiä",
    "\u202ertl",
    "../../etc/passwd",
    "a\\",
    "$HOME",
    "*",
]

#: A key that is valid for every dict of strings in the schema (sysctls, cmdline).
DICT_KEY = "vm.swappiness"

#: The smallest valid declaration of each model, and how it is validated and rendered.
ROOTS: dict[type[BaseModel], dict[str, Any]] = {
    NodeProfile: {},
    ContainerSpec: {
        "vmid": 110,
        "hostname": "llm-a",
        "ostemplate": "local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst",
    },
    ContainerSettings: {},
}


def _has_str(annotation: Any) -> bool:
    if annotation is str:
        return True
    if get_origin(annotation) is Literal:
        return any(isinstance(arg, str) for arg in get_args(annotation))
    if get_origin(annotation) in (Union, types.UnionType):
        return any(_has_str(arg) for arg in get_args(annotation))
    return False


def _slots_of(annotation: Any, path: tuple[str, ...]) -> list[tuple[tuple[str, ...], str]]:
    """(path, kind) for every place a string goes: 'value', 'item', 'key', 'dict-value'."""
    origin, args = get_origin(annotation), get_args(annotation)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return string_slots(annotation, path)
    if origin in (Union, types.UnionType):
        found: list[tuple[tuple[str, ...], str]] = []
        for arg in args:
            found += [s for s in _slots_of(arg, path) if s not in found]
        return found
    if origin is list:
        return [(path, "item")] if _has_str(args[0]) else []
    if origin is dict:
        kinds = ["key"] if _has_str(args[0]) else []
        value_kind = "dict-value" if _has_str(args[0]) else "int-dict-value"
        return [(path, k) for k in kinds + ([value_kind] if _has_str(args[1]) else [])]
    return [(path, "value")] if _has_str(annotation) else []


def string_slots(model: type[BaseModel], prefix: tuple[str, ...] = ()) -> list:
    slots = []
    for name, field in model.model_fields.items():
        slots += _slots_of(field.annotation, (*prefix, name))
    return slots


def _placed(base: dict[str, Any], path: tuple[str, ...], kind: str, value: str) -> dict:
    data = {**base}
    node = data
    for part in path[:-1]:
        node[part] = dict(node.get(part) or {})
        node = node[part]
    node[path[-1]] = {
        "value": value,
        "item": [value],
        "key": {value: "1"},
        "dict-value": {DICT_KEY: value},
        "int-dict-value": {0: value},
    }[kind]
    return data


def _validate(model: type[BaseModel], data: dict) -> tuple[Any, str | None]:
    """(validated object, None) or (None, the error text the user sees)."""
    try:
        if model is NodeProfile:
            return load_profile("gpu-07", {"gpunode": data}), None
        if model is ContainerSpec:
            return validate_containers("pve1", [data], {}, 8)[0], None
        return container_target("ct-1", {CONTAINER_DATA_KEY: data}, {}, {}).settings, None
    except (ProfileError, ContainerSpecError, ContainerDeployError) as exc:
        return None, str(exc)


def _field_in_error(model: type[BaseModel], path: tuple[str, ...]) -> str:
    dotted = ".".join(path)
    if model is NodeProfile:
        return f"gpu-07: gpunode.{dotted}"
    if model is ContainerSpec:
        return f"pve1: containers[0].{dotted}"
    return f"ct-1: {CONTAINER_DATA_KEY}.{dotted}"


def _rendered(obj: Any) -> list[str]:
    if isinstance(obj, NodeProfile):
        return node_shell(obj)
    if isinstance(obj, ContainerSpec):
        return container_shell(obj)
    return settings_shell(obj)


CASES = [
    pytest.param(model, path, kind, id=f"{model.__name__}.{'.'.join(path)}[{kind}]")
    for model in ROOTS
    for path, kind in string_slots(model)
]


def test_the_walk_finds_every_string_field():
    found = {(m.__name__, ".".join(p)) for m in ROOTS for p, _ in string_slots(m)}
    for expected in [("NodeProfile", "cpu_governor"), ("NodeProfile", "pcie_selector.vendor"),
                     ("NodeProfile", "sysctls"), ("NodeProfile", "nvidia_packages"),
                     ("ContainerSpec", "net0"), ("ContainerSpec", "extra_lxc"),
                     ("ContainerSettings", "nvidia_packages")]:
        assert expected in found


def _bash_n(script: str) -> None:
    proc = subprocess.run(["bash", "-n"], input=script, capture_output=True, text=True)
    assert proc.returncode == 0, f"bash -n failed: {proc.stderr}\n{script[:2000]}"


def _one_word(value: str, script: str) -> None:
    """Where the value shows up in a command, shlex gives it back inside a single word."""
    needle = value.strip()
    if not needle or needle not in script:
        return
    words = shlex.split(script, comments=True)
    assert any(needle in word for word in words), f"{value!r} split across words in {script!r}"


@pytest.mark.parametrize(("model", "path", "kind"), CASES)
def test_hostile_value_is_refused_or_inert(model, path, kind):
    base = ROOTS[model]
    obj, _ = _validate(model, base)
    assert obj is not None, "the base declaration must be valid"
    for value in HOSTILE:
        obj, error = _validate(model, _placed(base, path, kind, value))
        if error is not None:
            assert _field_in_error(model, path) in error, error
            shown = repr(value)[:20]
            assert shown in error or repr(value.strip())[:20] in error, error
            assert len(error) < 2000, "a 4 KiB value must not be echoed whole"
            continue
        for script in _rendered(obj):
            _bash_n(script)
            _one_word(value, script)
