"""gpunode as a package: the wheel holds one top-level package, and the documented example
deploy (docs/pyinfra.md) runs from a folder outside the repository on a wheel-only install.

Builds the wheel (pip wheel, no dependencies), installs it into a fresh virtual environment
(its dependencies from the package index or pip's cache) and compares the plan of
`pyinfra @local deploy.py --dry` there with the clone's `deploy/site.py`.
"""

from __future__ import annotations

import re
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

from tests.lab.pyinfra_cli import REPO, run_pyinfra

GUIDE = REPO / "docs" / "pyinfra.md"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out),
                    str(REPO)], check=True, capture_output=True, timeout=600)
    return next(out.glob("gpunode-*.whl"))


@pytest.fixture(scope="module")
def wheel_env(wheel, tmp_path_factory) -> Path:
    """A fresh virtual environment with only the wheel (and its dependencies) installed."""
    env = tmp_path_factory.mktemp("venv")
    venv.create(env, with_pip=True)
    subprocess.run([str(env / "bin" / "python"), "-m", "pip", "install", "-q",
                    "--disable-pip-version-check", str(wheel)],
                   check=True, capture_output=True, timeout=900)
    return env


def guide_example(heading: str, first_line: str) -> str:
    """The python code block of docs/pyinfra.md's section `heading` that starts with
    first_line."""
    section = GUIDE.read_text().split(f"## {heading}\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    return next(block for block in blocks if block.startswith(first_line))


def test_wheel_has_one_top_level_package_with_templates_and_deploys(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    assert {name.split("/", 1)[0] for name in names if not name.startswith("gpunode-")} == {
        "gpunode"}
    assert "gpunode/templates/sysctl/90-gpunode.conf.j2" in names
    assert "gpunode/deploys/site.py" in names
    assert "gpunode/schema/node-profile.schema.json" in names
    assert "gpunode/prometheus/gpunode-rules.yml" in names
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    text = zipfile.ZipFile(wheel).read(entry_points).decode()
    assert "pct = gpunode.roles.lxc_gpu.connector:PctConnector" in text


def test_the_documented_example_runs_outside_the_repo_with_the_clones_plan(wheel_env, tmp_path):
    project = tmp_path / "my-pyinfra-project"
    project.mkdir()
    (project / "deploy.py").write_text(guide_example("Your own pyinfra project", "# deploy.py"))
    installed = run_pyinfra("deploy.py", "--dry", inventory="@local",
                            pyinfra=str(wheel_env / "bin" / "pyinfra"), cwd=project,
                            env={"PYTHONPATH": ""}, timeout=600)
    clone = run_pyinfra("deploy/site.py", "--dry", inventory="@local", timeout=600)
    assert installed.returncode == 0, installed.log[-3000:]
    assert clone.returncode == 0, clone.log[-3000:]
    assert installed.planned_changes() == clone.planned_changes()
    assert installed.planned_changes(), "the plan of a fresh machine is not empty"
    where = subprocess.run(
        [str(wheel_env / "bin" / "python"), "-c", "import gpunode; print(gpunode.__file__)"],
        cwd=project, capture_output=True, text=True, check=True).stdout
    assert str(wheel_env) in where and str(REPO) not in where


def test_pct_connector_registers_through_the_entry_point(wheel_env):
    code = ("from importlib.metadata import entry_points;"
            "print(entry_points(group='pyinfra.connectors')['pct'].load().__name__)")
    out = subprocess.run([str(wheel_env / "bin" / "python"), "-c", code], capture_output=True,
                         text=True, check=True, timeout=120).stdout
    assert out.strip() == "PctConnector"


def test_the_installed_package_prints_its_schema_and_checks_a_profile(wheel_env, tmp_path):
    python = str(wheel_env / "bin" / "python")
    schema = subprocess.run([python, "-m", "gpunode", "schema"], cwd=tmp_path, text=True,
                            capture_output=True, check=True, timeout=120).stdout
    assert schema == (REPO / "gpunode" / "schema" / "node-profile.schema.json").read_text()
    profile = tmp_path / "p.yaml"
    profile.write_text("max_read_request: 3000\n")
    bad = subprocess.run([python, "-m", "gpunode", "validate", str(profile)], cwd=tmp_path,
                         text=True, capture_output=True, timeout=120)
    assert bad.returncode == 1 and "max_read_request: 3000 is not a MaxReadReq size" in bad.stdout
