"""The package reads top-down: no import runs back up the layers, and none goes round.

deploys -> roles/<role> -> ops (generic operations) -> facts (the node's parsers and the one
read) -> profile (the schema) -> pyinfra_adapter (pyinfra's internals). A module imports its
own layer or those below: facts may use the profile's types (a check's Status, the allowed
patterns), the profile never reads the node. A role imports no other role: what two roles
share (the Proxmox LXC config parser, the GPU device parsers) lives below both. No module
reaches itself through its imports, within a layer too (gpunode.facts.snapshot_model holds
the models that the read and the run's store share). Every import is read, those inside
functions included.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from pathlib import Path

import gpunode

PACKAGE = Path(gpunode.__file__).parent
RANKS = {
    "gpunode.pyinfra_adapter": 0,
    "gpunode.profile": 1,
    "gpunode.decode": 1,
    "gpunode.facts": 2,
    "gpunode.ops": 3,
    "gpunode.deploys": 5,
    "gpunode.cli": 5,
    "gpunode.__main__": 5,
}
ROLE_RANK = 4


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


def cycles(found: Iterable[tuple[str, str]]) -> list[list[str]]:
    """Each set of modules that reach each other through imports (Tarjan's strongly
    connected components of more than one module, or a module importing itself)."""
    graph: dict[str, set[str]] = {}
    for m, t in found:
        graph.setdefault(m, set()).add(t)
        graph.setdefault(t, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = stack[stack.index(v):]
            del stack[stack.index(v):]
            if len(comp) > 1 or v in graph[v]:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_import_cycle():
    assert cycles(edges()) == []


def test_the_cycle_check_bites():
    """Two modules of one layer that import each other (the read and the store, as they
    were), a longer ring and a self-import are caught; a diamond is not."""
    pair = [("gpunode.facts.node_read", "gpunode.facts.snapshot"),
            ("gpunode.facts.snapshot", "gpunode.facts.node_read")]
    ring = [("a", "b"), ("b", "c"), ("c", "a")]
    diamond = [("w", "x"), ("w", "y"), ("x", "z"), ("y", "z")]
    assert cycles(pair) == [["gpunode.facts.node_read", "gpunode.facts.snapshot"]]
    assert cycles(ring) == [["a", "b", "c"]]
    assert cycles([("s", "s")]) == [["s"]]
    assert cycles(diamond) == []


def test_the_profile_reads_no_fact():
    """The schema sits below the node's parsers: a profile module importing a fact is an
    upward import (as gpunode.profile.node's kernel check once was)."""
    assert layer("gpunode.profile.node")[0] < layer("gpunode.facts.kernels")[0]
    assert not [t for m, t in edges() if m.startswith("gpunode.profile")
                and t.startswith("gpunode.facts")]
