"""``python -m gpunode``: the profile's JSON Schema, and a check of a profile file without a host.

    python -m gpunode schema                  # the JSON Schema of a profile (NodeProfile)
    python -m gpunode validate FILE [FILE..]  # check profile files (YAML); exit 1 on a problem
    python -m gpunode decode --config FILE --gpu NAME --gpus N --tp N [--json]
                                              # batch-1 decode ceiling (docs/decode.md)

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
    _decode_parser(commands)
    args = parser.parse_args(argv)
    if args.command == "decode":
        return _decode(args)
    if args.command == "schema":
        sys.stdout.write(schema_text())
        return 0
    if args.command == "rules":
        sys.stdout.write(RULES_FILE.read_text())
        return 0
    return _validate(args.files)


GGUF_HEAD_BYTES = 64 << 20   # enough for a header with a 256k-token vocabulary


def _decode_parser(commands: Any) -> None:
    cmd = commands.add_parser("decode", help="how fast one stream (batch 1) could decode: the "
                              "step's terms, the ceiling and the binding term, from files")
    cmd.add_argument("--config", required=True, metavar="FILE",
                     help="the model's config.json, or its .gguf file")
    cmd.add_argument("--gpu", required=True, metavar="NAME",
                     help="the GPU's name as nvidia-smi prints it (gpunode/decode/gpus.yaml)")
    cmd.add_argument("--gpus", type=_count, metavar="N", help="GPUs on the node (default: --tp)")
    cmd.add_argument("--tp", type=_count, default=1, metavar="N", help="tensor-parallel size")
    cmd.add_argument("--weights-bytes", type=_count, metavar="N",
                     help="all weight files' bytes (every shard); default: params x dtype")
    cmd.add_argument("--allreduce-us", type=float, metavar="X",
                     help="one all-reduce's time, measured (nccl-tests at hidden x 2 bytes)")
    cmd.add_argument("--link", choices=_links(), help="the GPUs' link (nvidia-smi topo -m)")
    cmd.add_argument("--context", type=_count, default=1024, metavar="N",
                     help="tokens of KV cache read each step (default 1024)")
    cmd.add_argument("--eager", action="store_true", help="CUDA graphs off (--enforce-eager)")
    cmd.add_argument("--json", action="store_true", help="print the report's decode object")


def _count(text: str) -> int:
    """A whole number >= 0 (argparse type: a bad one exits 2 with its usage line)."""
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number >= 0")
    return int(text)


def _links() -> tuple[str, ...]:
    from gpunode.decode.plan import LINKS
    return LINKS


def _read_model(path: Path) -> dict[str, Any] | Any:
    """The config.json's object or the GGUF file's header; OSError / ValueError on a bad file."""
    from gpunode.decode.gguf import parse_gguf_header
    with path.open("rb") as handle:
        head = handle.read(GGUF_HEAD_BYTES)
    if head[:4] == b"GGUF":
        return parse_gguf_header(head)
    config = json.loads(head.decode("utf-8"))
    if not isinstance(config, dict):
        raise ValueError("not a JSON object")
    return config


def _decode(args: argparse.Namespace) -> int:
    """Print the decode step (text bar or --json); exit 2 on bad or missing input."""
    from gpunode.decode.plan import plan_inputs
    from gpunode.decode.shape import DecodeInputError
    from gpunode.decode.step import decode_json, decode_step, step_bar
    path = Path(args.config)
    try:
        model = _read_model(path)
        inputs = plan_inputs(model, f"config.json {path}", args.gpu, gpus=args.gpus,
                             tp=args.tp, weights_bytes=args.weights_bytes,
                             allreduce_us=args.allreduce_us, context=args.context,
                             eager=args.eager, link=args.link)
    except DecodeInputError as err:
        print(f"decode: {path}: {err}", file=sys.stderr)
        return 2
    except ValidationError as err:
        for item in err.errors():
            field = ".".join(str(part) for part in item["loc"])
            print(f"decode: {field}: {item['msg']}; give a value in range", file=sys.stderr)
        return 2
    except (OSError, UnicodeDecodeError, ValueError) as err:
        print(f"decode: --config {path}: cannot read it ({err}); give the model's "
              "config.json or .gguf file", file=sys.stderr)
        return 2
    result = decode_step(inputs)
    if args.json:
        print(json.dumps(decode_json(result), indent=2))
    else:
        print(f"{inputs.shape.architecture if inputs.shape else '?'} on "
              f"{args.tp} x {inputs.gpu.name if inputs.gpu else args.gpu}, context "
              f"{args.context}")
        print(step_bar(result))
    for gap in result.missing if args.json else ():
        print(f"decode: missing {gap['input']}: {gap['how']}", file=sys.stderr)
    return 2 if result.missing else 0
