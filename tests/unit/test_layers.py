"""The package reads top-down: no import runs back up the layers.

deploys -> roles/<role> -> ops (generic operations) -> facts, profile (parsers
and schema) -> pyinfra_adapter (pyinfra's internals). A module imports its own layer or
those below. A role imports no other role: what two roles share (the Proxmox LXC config
parser, the GPU device parsers) lives below both. Every import is read, those inside
functions included.
"""

from __future__ import annotations

import ast
from pathlib import Path

import gpunode

PACKAGE = Path(gpunode.__file__).parent
RANKS = {
    "gpunode.pyinfra_adapter": 0,
    "gpunode.facts": 1,
    "gpunode.profile": 1,
    "gpunode.decode": 1,
    "gpunode.ops": 2,
    "gpunode.deploys": 4,
    "gpunode.cli": 4,
    "gpunode.__main__": 4,
}
ROLE_RANK = 3


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {module_name(p): p for p in PACKAGE.rglob("*.py")}


def layer(module: str) -> tuple[int, str]:
    """(rank, group): group is the role package for a role's module."""
    for prefix, rank in RANKS.items():
        if module == prefix or module.startswith(prefix + "."):
            return rank, prefix
    parts = module.split(".")
    if module in ("gpunode", "gpunode.roles"):
        return 0, "gpunode"
    if parts[:2] == ["gpunode", "roles"] and len(parts) >= 3:
        return ROLE_RANK, ".".join(parts[:3])
    raise AssertionError(f"{module}: in no layer; add its folder to RANKS")


def imports(module: str) -> set[str]:
    """The gpunode modules that module imports (a `from pkg import submodule` names it)."""
    tree = ast.parse(MODULES[module].read_text())
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("gpunode")}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("gpunode"):
            base = node.module or ""
            subs = {f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in MODULES}
            found |= subs or {base}
    return found


def edges() -> list[tuple[str, str]]:
    return [(m, target) for m in sorted(MODULES) for target in sorted(imports(m))]


def test_every_module_is_in_a_layer():
    for module in MODULES:
        layer(module)


def test_no_import_runs_back_up():
    upward = [
        f"{m} -> {t}" for m, t in edges() if layer(t)[0] > layer(m)[0]
    ]
    assert upward == []


def role_to_role_imports(found: list[tuple[str, str]]) -> list[str]:
    """Every import of one role's module by another role's module."""
    return [
        f"{m} -> {t}"
        for m, t in found
        if layer(m)[0] == layer(t)[0] == ROLE_RANK
        and layer(m)[1] != layer(t)[1]
    ]


def test_roles_import_no_role():
    assert role_to_role_imports(edges()) == []


def test_the_role_rule_bites():
    """A role's parser used by another role is caught; a role's own modules and what lies
    below the roles are not."""
    caught = ("gpunode.roles.audit.container_facts", "gpunode.roles.lxc_gpu.gpu_lines")
    fine = [("gpunode.roles.lxc_gpu.plan", "gpunode.roles.lxc_gpu.gpu_lines"),
            ("gpunode.roles.audit.container_facts", "gpunode.facts.pve_config")]
    assert role_to_role_imports([caught, *fine]) == [" -> ".join(caught)]


def test_the_check_finds_an_upward_import():
    """The rule bites: an operation importing a role, a parser importing an operation."""
    assert layer("gpunode.roles.container.ops")[0] > layer("gpunode.ops.apt")[0]
    assert layer("gpunode.ops.apt")[0] > layer("gpunode.facts.dpkg")[0]
    assert layer("gpunode.facts.snapshot")[0] > layer("gpunode.pyinfra_adapter")[0]
    assert "gpunode.facts.pve_config" in imports("gpunode.roles.lxc_gpu.ops")
