"""python -m gpunode schema / validate: the shipped JSON Schema is the model's, an editor that
uses it accepts what the model accepts and flags what it refuses; validate names field and fix."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
import yaml

from gpunode import cli
from gpunode.profile.node import NodeProfile

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "profiles" / "inference.yaml"


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gpunode", *args], capture_output=True,
                          text=True, cwd=REPO, check=False)


def schema_errors(profile: dict) -> list[str]:
    validator = jsonschema.Draft202012Validator(cli.profile_schema())
    return [e.message for e in validator.iter_errors(profile)]


def test_schema_command_prints_the_shipped_schema():
    result = run_cli("schema")
    assert result.returncode == 0
    assert result.stdout == cli.SCHEMA_FILE.read_text(), "stale schema: run make docs"
    schema = json.loads(result.stdout)
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema["additionalProperties"] is False
    assert schema["properties"]["max_read_request"]["enum"] == [128, 256, 512, 1024, 2048, 4096]
    governors = schema["properties"]["cpu_governor"]["anyOf"][0]["enum"]
    assert "performance" in governors and "schedutil" in governors
    assert not any('"gpunode":' in line for line in result.stdout.splitlines())


def test_rules_command_prints_the_shipped_prometheus_rules():
    result = run_cli("rules")
    assert result.returncode == 0
    assert result.stdout == cli.RULES_FILE.read_text()
    groups = yaml.safe_load(result.stdout)["groups"]
    assert "GpunodeSettingDrifted" in {r.get("alert") for g in groups for r in g["rules"]}


def test_the_example_profile_names_the_schema_and_is_valid_for_both():
    first = EXAMPLE.read_text().splitlines()[0]
    assert first == "# yaml-language-server: $schema=../gpunode/schema/node-profile.schema.json"
    assert (EXAMPLE.parent / first.split("=", 1)[1]).resolve() == cli.SCHEMA_FILE
    data = yaml.safe_load(EXAMPLE.read_text())
    assert schema_errors(data) == []
    NodeProfile.model_validate(data)
    assert schema_errors(NodeProfile().model_dump(mode="json")) == []


@pytest.mark.parametrize("profile", [
    {"max_read_request": 3000},
    {"cpu_governor": "performance; reboot"},
    {"maxreadreq": 4096},
    {"max_cstate": -1},
    {"max_cstate": 99999},
    {"sysctls": {"Not A Key": 1}},
    {"sysctls": {"vm.swappiness": "10; reboot"}},
    {"cmdline": {"quiet": "$(reboot)"}},
    {"nvidia_driver": "latest!"},
    {"nvidia_packages": ["nvidia-smi; touch x"]},
    {"pcie_selector": {"vendor": "nvidia"}},
    {"verify_interval": "soon"},
    {"metrics_dir": "relative/dir"},
    {"memlock": 100},
    {"modules": ["bad module"]},
])
def test_what_the_model_refuses_the_schema_flags(profile):
    with pytest.raises(ValueError):
        NodeProfile.model_validate(profile)
    assert schema_errors(profile), f"{profile}: the editor would not flag it"


@pytest.mark.parametrize("profile", [
    {"sysctls": {"vm.swappiness": 10, "net.ipv4.tcp_congestion_control": "bbr",
                 "kernel.numa_balancing": None}},
    {"pcie_selector": {"vendor": "0x10DE", "classes": ["03"]}},
    {"cmdline": {"iommu": "pt", "quiet": None}},
    {"max_cstate": None, "memlock": 1 << 30, "gpu_power_limit": {"0": 300, "1": "max"}},
])
def test_what_the_model_accepts_the_schema_accepts(profile):
    NodeProfile.model_validate(profile)
    assert schema_errors(profile) == []


def test_validate_names_file_field_value_and_fix(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("max_read_request: 3000\nmaxreadreq: 1\n")
    result = run_cli("validate", str(EXAMPLE), str(bad))
    assert result.returncode == 1
    lines = result.stdout.splitlines()
    assert lines[0] == f"{EXAMPLE}: valid gpunode profile"
    assert f"{bad}: max_read_request: 3000 is not a MaxReadReq size; allowed:" in result.stdout
    assert f"{bad}: maxreadreq: unknown key: remove it or check its spelling" in result.stdout


@pytest.mark.parametrize(("text", "said"), [
    ("- a\n- b\n", "a profile is a YAML mapping of settings"),
    ("a: [\n", "not YAML"),
])
def test_validate_a_file_that_is_no_profile(tmp_path, text, said):
    path = tmp_path / "p.yaml"
    path.write_text(text)
    assert said in cli.validate_file(path)[0]
    assert "cannot read it" in cli.validate_file(tmp_path / "missing.yaml")[0]
