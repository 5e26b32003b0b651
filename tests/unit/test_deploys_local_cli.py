"""pyinfra's conventions over the real CLI on @local, in this process: a deploy named by its
module path (`pyinfra INV gpunode.deploys.site`), one deploy per role, and every line of
`--dry`, `--dry --diff` and the audit's run within 100 columns, the audit ending with its
verdict (no "Error: executed 0 commands", no "No hosts remaining!")."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pyinfra
import pytest
from click.testing import CliRunner
from pyinfra_cli.cli import cli

from tests.unit.test_deploys_local import PINNED, _cli_mode, planned  # noqa: F401 (fixture)


def cli_log(tmp_path: Path, args: list[str], data: dict, exit_codes: tuple[int, ...] = (0,),
            ) -> str:
    """The log of `pyinfra INVENTORY ARGS...` with @local given data."""
    inventory = tmp_path / "inventory.py"
    inventory.write_text(f"hosts = [('@local', {data!r})]\n")
    handlers = list(pyinfra.logger.handlers)  # each in-process run adds the CLI's log handler
    pyinfra.logger.handlers[:] = []
    try:
        result = CliRunner().invoke(cli, [str(inventory), *args], env=os.environ)
    finally:
        pyinfra.logger.handlers[:] = handlers
    assert "Traceback" not in result.output, result.output
    assert result.exit_code in exit_codes, result.output + repr(result.exception)
    return result.output


def wide(log: str) -> list[str]:
    plain = re.sub(r"\x1b\[[0-9;]*m", "", log)
    return [line for line in plain.splitlines() if len(line) > 100]


def test_a_deploy_named_by_its_module_path_plans_what_its_file_plans(tmp_path):
    for folder in ("m", "f"):
        (tmp_path / folder).mkdir()
    by_module = cli_log(tmp_path / "m", ["gpunode.deploys.site", "--dry"], PINNED)
    by_file = cli_log(tmp_path / "f", ["deploy/site.py", "--dry"], PINNED)
    assert planned(by_module) and planned(by_module) == planned(by_file)


@pytest.mark.parametrize(("deploy", "wanted", "said"), [
    ("kernel_only", "gpunode: kernel | Persist kernel cmdline", "cmdline"),
    ("nvidia_driver_only", None, "NVIDIA driver 550.127.05 wanted"),
    ("gpu_runtime_only", None, "GPU device nodes, persistence, power limits: not applicable"),
    ("verify_timer_only", None, None),
    ("host_tuning_only", "gpunode: tuning | Write /etc/sysctl.d/90-gpunode.conf", None),
])
def test_one_deploy_per_role_runs_that_role_only(tmp_path, deploy, wanted, said):
    """This machine has no NVIDIA driver and no systemd: the driver and runtime roles say so
    and plan nothing; no role plans another role's operations."""
    log = cli_log(tmp_path, [f"gpunode.deploys.{deploy}", "--dry"], PINNED)
    names = planned(log).splitlines()
    assert names[0] == "Record the node's state before gpunode's first change"
    assert names[-1] == "Verify the live node against the profile"
    roles = {name.split(" | ")[0] for name in names[1:-1]}
    assert roles == ({wanted.split(" | ")[0]} if wanted else set()), names
    assert wanted is None or wanted in names
    assert said is None or said in " ".join(log.split())


def test_dry_diff_lines_fit_100_columns(tmp_path):
    """The owned files' content diff: template lines past 90 columns fold after '+ ...'."""
    log = cli_log(tmp_path, ["deploy/site.py", "--dry", "--diff"], PINNED)
    assert "Will create /etc/sysctl.d/90-gpunode.conf" in log or "Will modify" in log
    assert wide(log) == []
    assert re.search(r"^ {10}\S? ?\.\.\. ", log, re.M), "no folded line: widen the test"


def test_the_audits_run_ends_with_a_verdict_within_100_columns(tmp_path):
    log = cli_log(tmp_path, ["deploy/audit.py", "-y"], {"report": "none"}, exit_codes=(0, 1))
    assert wide(log) == []
    assert "Error: executed" not in log and "No hosts remaining" not in log
    assert "--> Results:" in log
    verdict = re.search(r"@local: (READY|NOT READY)", log)
    assert verdict, log
    if verdict.group(1) == "NOT READY":
        assert re.search(r"@local: audit failed: \d+ open \(P0 \d+, P1 \d+\): not ready", log)


def test_a_long_diff_line_folds_at_a_space_and_keeps_its_colour():
    from gpunode.ops.changes import folded_diff_line

    line = "\x1b[32m+ # " + "word " * 40 + "\x1b[0m"
    parts = folded_diff_line(line)
    assert len(parts) == 3 and all(p.startswith("\x1b[32m") and p.endswith("\x1b[0m")
                                   for p in parts)
    plain = [re.sub(r"\x1b\[[0-9;]*m", "", p) for p in parts]
    assert all(len(p) <= 90 for p in plain) and plain[1].startswith("+ ... word")
    assert " ".join(p.removeprefix("+ ... ") for p in plain).split() == line[5:-4].split()
    assert folded_diff_line("  short") == ["  short"]
    assert len(folded_diff_line("+ " + "x" * 200)) == 3  # no space: cut at the width


def test_group_data_beside_the_inventory_holds_the_profile(tmp_path):
    """pyinfra reads group_data/all.py (and group_data/GROUP.py) beside the inventory: a
    profile there is validated like one in the inventory, naming host and field."""
    (tmp_path / "group_data").mkdir()
    (tmp_path / "group_data" / "all.py").write_text('gpunode = {"max_read_request": 3000}\n')
    log = cli_log(tmp_path, ["deploy/site.py", "--dry"], {}, exit_codes=(1,))
    assert "@local: gpunode.max_read_request: 3000 is not a MaxReadReq size" in log
    (tmp_path / "group_data" / "all.py").write_text('gpunode = {"max_read_request": 1024}\n')
    (tmp_path / "again").mkdir()
    (tmp_path / "again" / "group_data").symlink_to(tmp_path / "group_data")
    log = cli_log(tmp_path / "again", ["deploy/site.py", "--dry"], {})
    assert "Set PCIe MaxReadReq=1024 on matched devices" in planned(log)


@pytest.mark.parametrize("deploy", ["deploy/audit.py", "deploy/site.py"])
def test_someone_elses_metrics_file_is_refused_by_the_audit_and_the_deploy(tmp_path, deploy):
    """The read-only audit and the deploy both refuse, before anything runs, a metrics path
    where a file gpunode did not write already is; the file stays as it was (#42)."""
    theirs = tmp_path / "theirs.prom"
    theirs.write_text("secret 1\n")
    theirs.chmod(0o600)
    log = cli_log(tmp_path, [deploy, "--dry"], {"gpunode_metrics_file": str(theirs)},
                  exit_codes=(1,))
    assert f"@local: gpunode_metrics_file: {theirs} exists and gpunode did not write it" in log
    assert "Fix:" in log and theirs.read_text() == "secret 1\n"
