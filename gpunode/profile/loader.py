"""Load and validate profiles from host data or YAML, with errors that name host and field."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError
from pyinfra.api.exceptions import PyinfraError

from gpunode.profile.allowed import shown
from gpunode.profile.node import NodeProfile
from gpunode.pyinfra_adapter import run_store

PROFILE_DATA_KEY = "gpunode"
PROFILE_FILE_KEY = "gpunode_profile_file"


class ProfileError(PyinfraError, ValueError):
    """A profile that can't be used; the message names host, field, bad value and the fix."""


def format_validation_error(host_name: str, error: ValidationError, prefix: str = "") -> str:
    """One line per problem: host, dotted field path, bad value and what is allowed."""
    lines = [f"{host_name}: invalid gpunode profile ({error.error_count()} problem(s)):"]
    for item in error.errors():
        field = ".".join(str(part) for part in (prefix, *item["loc"]) if part != "")
        message = item["msg"].removeprefix("Value error, ")
        if item["type"] == "extra_forbidden":
            message = "unknown key: remove it or check its spelling (docs/settings.md)"
        bad = item.get("input")
        got = "" if isinstance(bad, Mapping) else f" (got {shown(bad)})"
        lines.append(f"  {host_name}: {field or '<profile>'}: {message}{got}")
    return "\n".join(lines)


def load_yaml_profile(path: str | Path) -> dict[str, Any]:
    """Read a YAML profile file: a mapping of NodeProfile fields."""
    text = Path(path).read_text(encoding="utf-8")
    data = yaml.safe_load(text) or {}
    if not isinstance(data, dict):
        raise ProfileError(f"{path}: a profile must be a YAML mapping of settings")
    return data


def raw_profile_data(host_name: str, data: Mapping[str, Any]) -> dict[str, Any]:
    """Merge the YAML profile file (if named) with the inline `gpunode` mapping (inline wins)."""
    merged: dict[str, Any] = {}
    file_name = data.get(PROFILE_FILE_KEY)
    if file_name:
        try:
            merged.update(load_yaml_profile(file_name))
        except (OSError, yaml.YAMLError) as exc:
            raise ProfileError(
                f"{host_name}: {PROFILE_FILE_KEY}: cannot read {file_name}: {exc}"
            ) from None
    inline = data.get(PROFILE_DATA_KEY) or {}
    if not isinstance(inline, Mapping):
        raise ProfileError(
            f"{host_name}: {PROFILE_DATA_KEY}: must be a mapping of settings, got {inline!r}"
        )
    merged.update(inline)
    return merged


def load_profile(host_name: str, data: Mapping[str, Any]) -> NodeProfile:
    """Validate one host's profile from its data; raise ProfileError on any problem."""
    raw = raw_profile_data(host_name, data)
    try:
        return NodeProfile.model_validate(raw)
    except ValidationError as exc:
        raise ProfileError(format_validation_error(host_name, exc, PROFILE_DATA_KEY)) from None


def host_data_mapping(host: Any) -> dict[str, Any]:
    """The pyinfra host's data as a plain dict (works for real and test hosts)."""
    data = host.data
    if isinstance(data, Mapping):
        return dict(data)
    return {key: data.get(key) for key in (PROFILE_DATA_KEY, PROFILE_FILE_KEY)}


def profiles_of_run(inventory: Iterable[Any]) -> dict[str, NodeProfile]:
    """validate_hosts() of the run's inventory, once per run: each host's deploy asks, and
    validating N hosts N times would grow with the square of the fleet."""
    store = run_store("_gpunode_profiles")
    if "profiles" not in store:
        store["profiles"] = validate_hosts(inventory)
    return store["profiles"]


def validate_hosts(hosts: Iterable[Any]) -> dict[str, NodeProfile]:
    """Validate every host's profile; one ProfileError lists all bad hosts together."""
    profiles: dict[str, NodeProfile] = {}
    errors: list[str] = []
    for host in hosts:
        try:
            profiles[host.name] = load_profile(host.name, host_data_mapping(host))
        except ProfileError as exc:
            errors.append(str(exc))
    if errors:
        raise ProfileError("\n".join(errors))
    return profiles
