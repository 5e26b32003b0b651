"""``python -m gpunode``: the profile's JSON Schema, and a check of a profile file without a host.

    python -m gpunode schema                  # the JSON Schema of a profile (NodeProfile)
    python -m gpunode validate FILE [FILE..]  # check profile files (YAML); exit 1 on a problem

The schema is pydantic's (``NodeProfile.model_json_schema()``) with what the validators check
made visible to an editor: enums (MaxReadReq sizes, governors, ...), ranges and the anchored
patterns of gpunode.profile.allowed. gpunode/schema/node-profile.schema.json is this output
(``make docs`` writes it; tests/unit/test_docs.py checks it is current); the example profile
(profiles/inference.yaml) names it on its yaml-language-server line.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from gpunode import __version__
from gpunode.profile.allowed import (
    ABSOLUTE_DIR,
    CLASS_ID,
    CMDLINE_KEY,
    CMDLINE_VALUE,
    DRIVER_VERSION,
    HEX_ID,
    MODULE_NAME,
    PACKAGE_NAME,
    SYSCTL_INTEGERS,
    SYSCTL_KEY,
    SYSCTL_WORDS,
    TIME_SPAN,
)
from gpunode.profile.loader import format_validation_error
from gpunode.profile.node import MAX_READ_REQUEST_SIZES, NodeProfile

SCHEMA_FILE = Path(__file__).parent / "schema" / "node-profile.schema.json"
RULES_FILE = Path(__file__).parent / "prometheus" / "gpunode-rules.yml"
"""gpunode's Prometheus alert and recording rules (package data; docs/audit.md)."""


def anchored(pattern: re.Pattern[str]) -> str:
    """A Python pattern used with fullmatch, as a JSON Schema (ECMA-262) pattern."""
    return f"^(?:{pattern.pattern})$"


def hex_id(pattern: re.Pattern[str]) -> str:
    """The selector's ids as the validator takes them: any case, an optional 0x."""
    return "^(?:0[xX])?(?:" + pattern.pattern.replace("0-9a-f", "0-9a-fA-F") + ")$"


def _string(pattern: str) -> dict[str, Any]:
    return {"type": "string", "pattern": pattern}


def _nullable(schema: dict[str, Any]) -> dict[str, Any]:
    return {"anyOf": [schema, {"type": "null"}]}


def _list_of(pattern: str, max_items: int = 64) -> dict[str, Any]:
    return {"type": "array", "items": _string(pattern), "maxItems": max_items}


def _overrides() -> dict[str, dict[str, Any]]:
    """What each field's validator allows, where pydantic's own schema says less."""
    sysctl_value = {"anyOf": [{"type": "integer"}, _string(anchored(SYSCTL_INTEGERS)),
                              _string(anchored(SYSCTL_WORDS)), {"type": "null"}]}
    return {
        "modules": _list_of(anchored(MODULE_NAME)),
        "required_modules": _list_of(anchored(MODULE_NAME)),
        "max_read_request": {"type": "integer", "enum": list(MAX_READ_REQUEST_SIZES)},
        "sysctls": {"type": "object", "maxProperties": 256,
                    "propertyNames": {"pattern": anchored(SYSCTL_KEY), "maxLength": 128},
                    "additionalProperties": sysctl_value},
        "max_cstate": _nullable({"type": "integer", "minimum": 0, "maximum": 10}),
        "memlock": {"anyOf": [{"const": "unlimited"},
                              {"type": "integer", "minimum": 65536, "maximum": 2**50}]},
        "cmdline": {"type": "object", "propertyNames": {"pattern": anchored(CMDLINE_KEY)},
                    "additionalProperties": _nullable(_string(anchored(CMDLINE_VALUE)))},
        "nvidia_driver": _nullable(_string(anchored(DRIVER_VERSION))),
        "nvidia_packages": _nullable(_list_of(anchored(PACKAGE_NAME))),
        "verify_interval": _string(anchored(TIME_SPAN)),
        "metrics_dir": _string(anchored(ABSOLUTE_DIR)),
    }


def _selector_overrides() -> dict[str, dict[str, Any]]:
    return {
        "vendor": _string(hex_id(HEX_ID)),
        "device": _nullable(_string(hex_id(HEX_ID))),
        "classes": {"type": "array", "minItems": 1, "maxItems": 16,
                    "items": _string(hex_id(CLASS_ID))},
    }


def _merge(properties: dict[str, Any], overrides: dict[str, dict[str, Any]]) -> None:
    for name, override in overrides.items():
        kept = {k: v for k, v in properties[name].items()
                if k in ("default", "description", "title")}
        properties[name] = {**override, **kept}


def _strip_docs(node: Any) -> Any:
    """Drop gpunode's own documentation keys (the "gpunode" extra: the docs tables')."""
    if isinstance(node, dict):
        return {k: _strip_docs(v) for k, v in node.items() if k != "gpunode"}
    if isinstance(node, list):
        return [_strip_docs(v) for v in node]
    return node


def profile_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of a gpunode profile file."""
    schema = _strip_docs(NodeProfile.model_json_schema())
    _merge(schema["properties"], _overrides())
    _merge(schema["$defs"]["PcieSelector"]["properties"], _selector_overrides())
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", **schema}


def schema_text() -> str:
    return json.dumps(profile_schema(), indent=2, ensure_ascii=False) + "\n"


def validate_file(path: Path) -> list[str]:
    """The problems of one profile file (none: it is a valid profile)."""
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        return [f"{path}: cannot read it: {exc}"]
    except yaml.YAMLError as exc:
        return [f"{path}: not YAML: {exc}"]
    if data is None:
        data = {}
    if not isinstance(data, dict):
        return [f"{path}: a profile is a YAML mapping of settings (such as max_read_request: "
                f"4096), not a {type(data).__name__}"]
    try:
        NodeProfile.model_validate(data)
    except ValidationError as exc:
        return format_validation_error(str(path), exc).splitlines()
    return []


def _validate(paths: Sequence[str]) -> int:
    failed = 0
    for name in paths:
        problems = validate_file(Path(name))
        print("\n".join(problems) if problems else f"{name}: valid gpunode profile")
        failed += bool(problems)
    return 1 if failed else 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gpunode", description=__doc__.split("\n")[0])
    parser.add_argument("--version", action="version", version=f"gpunode {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("schema", help="print the JSON Schema of a profile file")
    commands.add_parser("rules", help="print gpunode's Prometheus alert and recording rules")
    check = commands.add_parser("validate", help="check profile files (YAML) without a host")
    check.add_argument("files", nargs="+", metavar="FILE")
    args = parser.parse_args(argv)
    if args.command == "schema":
        sys.stdout.write(schema_text())
        return 0
    if args.command == "rules":
        sys.stdout.write(RULES_FILE.read_text())
        return 0
    return _validate(args.files)
