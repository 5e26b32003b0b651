"""make docs: write the settings documentation generated from the schema.

Every block between ``<!-- gpunode:generated NAME -->`` and ``<!-- /gpunode:generated -->``
in docs/settings.md, docs/containers.md and each role's defaults.py is rendered from the
pydantic schema (gpunode.profile.docs):

- ``docs:node``: the host profile (NodeProfile), one row per setting (docs/settings.md);
- ``docs:container``: a container on the Proxmox host (ContainerSpec; docs/containers.md);
- ``docs:container-role``: the container role's settings (ContainerSettings; the same);
- ``role:NAME``: the fields gpunode.roles.NAME.defaults.READS names, of its SCHEMA.

It also writes the profile's JSON Schema, gpunode/schema/node-profile.schema.json
(gpunode.cli.schema_text: what ``python -m gpunode schema`` prints).

    python -m tools.docs          # rewrite the blocks
    python -m tools.docs --check  # exit 1 when a block differs (tests/unit/test_docs.py)
"""

from __future__ import annotations

import importlib
import re
import sys
from pathlib import Path

from gpunode.cli import SCHEMA_FILE, schema_text
from gpunode.profile.container import ContainerSpec
from gpunode.profile.docs import field_rows, markdown_table, text_list
from gpunode.profile.node import NodeProfile
from gpunode.roles.container.defaults import ContainerSettings

REPO = Path(__file__).resolve().parents[1]
ROLES = sorted(p.parent.name for p in (REPO / "gpunode" / "roles").glob("*/defaults.py"))
DOCS = [REPO / "docs" / "settings.md", REPO / "docs" / "containers.md"]
FILES = [*DOCS, *(REPO / "gpunode" / "roles" / r / "defaults.py" for r in ROLES)]
BLOCK = re.compile(r"(<!-- gpunode:generated (?P<name>[\w:-]+) -->\n)(?P<body>.*?)"
                   r"(<!-- /gpunode:generated -->)", re.S)

HOST_COLUMNS = {"field": "field", "default": "default", "description": "what it is",
                "why": "audit finding", "runtime": "runtime", "persistence": "persistence",
                "readback": "read back"}
CONTAINER_COLUMNS = {"field": "field", "default": "default", "description": "what it is",
                     "why": "why", "runtime": "how it is applied"}
DOC_MODELS = {"node": (NodeProfile, HOST_COLUMNS), "container": (ContainerSpec,
                 CONTAINER_COLUMNS), "container-role": (ContainerSettings, CONTAINER_COLUMNS)}


def role_defaults(role: str):
    return importlib.import_module(f"gpunode.roles.{role}.defaults")


def render(name: str) -> str:
    kind, _, arg = name.partition(":")
    if kind == "docs":
        model, columns = DOC_MODELS[arg]
        return markdown_table(field_rows(model), columns)
    if kind == "role":
        module = role_defaults(arg)
        return text_list(field_rows(module.SCHEMA, module.READS))
    raise KeyError(f"unknown generated block {name!r}")


def regenerate(text: str) -> str:
    return BLOCK.sub(lambda m: m.group(1) + render(m.group("name")) + m.group(4), text)


def stale_files() -> list[Path]:
    stale = [path for path in FILES if regenerate(path.read_text()) != path.read_text()]
    schema = SCHEMA_FILE.read_text() if SCHEMA_FILE.exists() else ""
    return stale + ([SCHEMA_FILE] if schema != schema_text() else [])


def generated(path: Path) -> str:
    return schema_text() if path == SCHEMA_FILE else regenerate(path.read_text())


def main(argv: list[str]) -> int:
    stale = stale_files()
    if "--check" in argv:
        for path in stale:
            print(f"{path.relative_to(REPO)}: generated settings text differs: run make docs")
        return 1 if stale else 0
    for path in stale:
        path.write_text(generated(path))
        print(f"wrote {path.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
