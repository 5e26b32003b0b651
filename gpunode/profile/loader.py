"""Load and validate profiles from host data or YAML, with errors that name host and field."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError
from pyinfra.api.exceptions import PyinfraError

from gpunode.profile.allowed import check_output_path, did_you_mean, shown
from gpunode.profile.metrics import check_metrics_file
from gpunode.profile.node import NodeProfile
from gpunode.profile.strict_yaml import load_strict_yaml
from gpunode.pyinfra_adapter import run_store

PROFILE_DATA_KEY = "gpunode"
PROFILE_FILE_KEY = "gpunode_profile_file"
#: Every host data key gpunode reads (the `gpunode_*` ones): any other `gpunode_*` key is a
#: typo that would do nothing, so it is refused with the nearest of these.
KNOWN_DATA_KEYS = frozenset({
    PROFILE_DATA_KEY, PROFILE_FILE_KEY, "gpunode_containers", "gpunode_container",
    "gpunode_metrics_file", "gpunode_audit_active", "gpunode_audit_active_timeout",
    "gpunode_audit_engine_metrics", "gpunode_audit_engine_metrics_timeout",
})


class ProfileError(PyinfraError, ValueError):
    """A profile that can't be used; the message names host, field, bad value and the fix."""


def format_validation_error(host_name: str, error: ValidationError, prefix: str = "") -> str:
    """One line per problem: host, dotted field path, bad value and what is allowed."""
    lines = [f"{host_name}: invalid gpunode profile ({error.error_count()} problem(s)):"]
    for item in error.errors():
        field = ".".join(str(part) for part in (prefix, *item["loc"]) if part != "")
        message = item["msg"].removeprefix("Value error, ")
        if item["type"] == "extra_forbidden":
            message = "unknown key: remove it or check its spelling (see docs/settings.md)"
            message += did_you_mean(str(item["loc"][-1]), fields_at(NodeProfile, item["loc"]))
        bad = item.get("input")
        got = "" if isinstance(bad, Mapping) else f" (got {shown(bad)})"
        lines.append(f"  {host_name}: {field or '<profile>'}: {message}{got}")
    return "\n".join(lines)


def fields_at(model: type[BaseModel], loc: tuple[Any, ...]) -> list[str]:
    """The field names of the model that holds the last part of loc (nested models walked)."""
    for part in loc[:-1]:
        field = model.model_fields.get(str(part))
        annotation = field.annotation if field else None
        if not (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
            return []
        model = annotation
    return list(model.model_fields)


def load_yaml_profile(path: str | Path) -> dict[str, Any]:
    """Read a YAML profile file strictly (strict_yaml): a mapping of NodeProfile fields."""
    text = Path(path).read_text(encoding="utf-8")
    data = load_strict_yaml(text, str(path)) or {}
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


#: Host data that names a file or folder gpunode writes (where pyinfra runs): checked by
#: check_output_path before anything runs.
METRICS_FILE_KEY = "gpunode_metrics_file"
OUTPUT_PATH_KEYS = {METRICS_FILE_KEY: "a metrics file path", "report_dir": "a report folder"}


def check_data_keys(host_name: str, data: Mapping[str, Any]) -> None:
    """ProfileError for host data keys that look like gpunode's (`gpunode_*`) but aren't, and
    for output paths (OUTPUT_PATH_KEYS) that are not plain paths under the allowed roots."""
    for key, what in OUTPUT_PATH_KEYS.items():
        if data.get(key):
            try:
                check_output_path(str(data[key]), what)
            except ValueError as exc:
                raise ProfileError(f"{host_name}: {key}: {exc}. Fix: name a file under the "
                                   "working folder or a data folder such as /var/lib/...") from None
    if data.get(METRICS_FILE_KEY):
        try:
            check_metrics_file(str(data[METRICS_FILE_KEY]), host_name)
        except ValueError as exc:
            raise ProfileError(f"{host_name}: {METRICS_FILE_KEY}: {exc}. Fix: name a new "
                               ".prom file (e.g. /var/lib/prometheus/node-exporter/"
                               "gpunode-audit.prom), or move that file away") from None
    unknown = sorted(k for k in data if isinstance(k, str) and k.startswith("gpunode_")
                     and k not in KNOWN_DATA_KEYS)
    if unknown:
        raise ProfileError("\n".join(
            f"{host_name}: {key}: unknown gpunode host data key: it would be ignored"
            f"{did_you_mean(key, KNOWN_DATA_KEYS)} (known: {', '.join(sorted(KNOWN_DATA_KEYS))})"
            for key in unknown))


def load_profile(host_name: str, data: Mapping[str, Any]) -> NodeProfile:
    """Validate one host's profile from its data; raise ProfileError on any problem."""
    check_data_keys(host_name, data)
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
    if callable(getattr(data, "dict", None)):  # pyinfra's HostData: every layer merged
        return dict(data.dict())
    return {key: data.get(key) for key in (PROFILE_DATA_KEY, PROFILE_FILE_KEY)}


def hosts_of_run(state: Any) -> list[Any]:
    """The hosts this run acts on: the inventory within `--limit` (and outside --exclude)."""
    return [host for host in state.inventory if state.is_host_in_limit(host)]


def profiles_of_run(state: Any) -> dict[str, NodeProfile]:
    """validate_hosts() of the run's hosts (hosts_of_run: a bad host outside `--limit` does not
    stop the run), once per run: each host's deploy asks, and validating N hosts N times
    would grow with the square of the fleet."""
    store = run_store("_gpunode_profiles")
    if "profiles" not in store:
        store["profiles"] = validate_hosts(hosts_of_run(state))
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
