"""Every deploy file, `pyinfra --dry @local deploy/X.py`, in this process (so the deploys and
roles count for coverage): real facts of this machine (no GPU, no Proxmox, maybe no systemd),
nothing executed. What must hold on any machine: no traceback, exit 0, the roles' operations
in the plan, and the refusals a host without Proxmox gets.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pyinfra
import pytest
from click.testing import CliRunner
from pyinfra.context import ctx_config, ctx_host, ctx_inventory, ctx_state
from pyinfra_cli.cli import cli

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _cli_mode(monkeypatch):
    monkeypatch.chdir(REPO)
    monkeypatch.setattr(pyinfra, "is_cli", True)
    yield
    for context in (ctx_state, ctx_host, ctx_inventory, ctx_config):
        context.reset()


def dry_run(tmp_path: Path, deploy: str, data: dict, exit_code: int = 0) -> str:
    """The log of `pyinfra --dry INVENTORY deploy` with @local given data."""
    inventory = tmp_path / "inventory.py"
    inventory.write_text(f"hosts = [('@local', {data!r})]\n")
    handlers = list(pyinfra.logger.handlers)  # each in-process run adds the CLI's log handler
    pyinfra.logger.handlers[:] = []
    try:
        result = CliRunner().invoke(cli, [str(inventory), deploy, "--dry"], env=os.environ)
    finally:
        pyinfra.logger.handlers[:] = handlers
    log = result.output
    assert "Traceback" not in log, log
    assert result.exit_code == exit_code, log + repr(result.exception)
    return log


def planned(log: str) -> str:
    """The operation names of the "Detected changes" table, one a line (a name the table
    wrapped, its continuation lines indented by two, joined back)."""
    names: list[str] = []
    rows = table_rows(log).get("--> Detected changes:", [])[1:]
    for row in rows:
        if row.startswith("      "):
            names[-1] += " " + row.strip()
        else:
            names.append(re.split(r"\s{2,}", row.strip())[0])
    return "\n".join(names)


def not_planned(log: str, operations: tuple[str, ...]) -> list[str]:
    """Those of operations that the dry run's "Detected changes" table does not name."""
    names = planned(log)
    return [operation for operation in operations if operation not in names]


def flat(log: str) -> str:
    """The log with its lines joined: gpunode wraps its long messages at 100 columns."""
    return " ".join(log.split())


PINNED = {
    "gpunode": {
        "nvidia_driver": "550.127.05",
        "cmdline": {"iommu": "pt"},
        "bootloader": "auto",
    }
}


def test_site_plans_every_role(tmp_path):
    log = dry_run(tmp_path, "deploy/site.py", PINNED)
    assert not_planned(log, ("gpunode: tuning", "Write /etc/sysctl.d/90-gpunode.conf",
                             "Set governor performance", "gpunode: kernel",
                             "Verify the live node against the profile")) == []
    # No NVIDIA package on this machine: reported, not changed (nvidia_driver_change false).
    assert "NVIDIA driver 550.127.05 wanted" in flat(log)
    assert "set nvidia_driver_change: true" in flat(log)


def test_site_with_a_driver_change_installs_the_pinned_version(tmp_path):
    data = {"gpunode": {**PINNED["gpunode"], "nvidia_driver_change": True}}
    log = dry_run(tmp_path, "deploy/site.py", data)
    assert "Install NVIDIA driver 550.127.05" in planned(log)
    assert "Release NVIDIA holds for the change" in planned(log)


def test_site_refuses_to_pin_a_kernel_that_is_not_installed(tmp_path):
    data = {"gpunode": {"kernel_pin": "6.8.12-9-pve"}}
    log = dry_run(tmp_path, "deploy/site.py", data, exit_code=1)
    assert "gpunode.kernel_pin: '6.8.12-9-pve' is not an installed kernel" in flat(log)


def test_host_deploy_tunes_and_verifies_only(tmp_path):
    log = dry_run(tmp_path, "deploy/host.py", {})
    assert "gpunode: tuning" in planned(log) and "Verify the live node" in planned(log)
    assert "gpunode: kernel" not in planned(log)


def test_containers_deploy_without_containers_does_nothing(tmp_path):
    log = dry_run(tmp_path, "deploy/containers.py", {})
    assert "gpunode: containers" not in planned(log)


def test_audit_deploy_reports_this_machine(tmp_path):
    data = {"report": "json", "report_dir": str(tmp_path / "reports")}
    log = dry_run(tmp_path, "deploy/audit.py", data)
    assert "@local: READY" in log or "@local: NOT READY" in log
    assert (tmp_path / "reports" / "@local.json").exists()


def test_containers_deploy_inside_a_container_pins_installs_and_verifies(tmp_path):
    """@local as a container reached over SSH: the container role plans its pin, install and
    read-back (with --dry nothing is installed; apt offers no NVIDIA package here)."""
    data = {"gpunode_container": {"nvidia_driver": "550.127.05", "gpus": 1}}
    log = dry_run(tmp_path, "deploy/containers.py", data)
    assert not_planned(log, ("gpunode: container | ",
                             "Write /etc/apt/preferences.d/90-gpunode-nvidia.pref",
                             "Install NVIDIA userspace 550.127.05 (no kernel module)",
                             "Hold NVIDIA userspace 550.127.05",
                             "Verify the container: GPUs, memlock, driver")) == []


def test_containers_deploy_refuses_containers_on_a_host_without_proxmox(tmp_path):
    spec = {"vmid": 110, "hostname": "llm-a", "gpus": [0],
            "ostemplate": "local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst"}
    log = dry_run(tmp_path, "deploy/containers.py", {"gpunode_containers": [spec]}, exit_code=1)
    assert "@local is not a Proxmox VE host (no `pct` command)" in flat(log)
    assert "nothing was changed" in flat(log)


def table_rows(log: str) -> dict[str, list[str]]:
    """The rows of each table pyinfra printed ("--> Detected changes:", "--> Results:")."""
    tables: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in log.splitlines():
        if line.startswith("-->"):
            table = line.endswith(("changes:", "Results:"))
            current = tables.setdefault(line, []) if table else None
        elif current is not None and line.strip():
            current.append(line)
        else:
            current = None
    return tables


@pytest.mark.parametrize("deploy", ["deploy/site.py", "deploy/host.py", "deploy/undo.py",
                                    "deploy/audit.py", "deploy/containers.py"])
def test_every_deploy_prints_within_100_columns_and_no_empty_table(tmp_path, deploy):
    """Issues #14/#17: the real CLI's output, every line at most 100 columns; every table
    holds operations or says "no operations"."""
    data = PINNED if deploy != "deploy/audit.py" else {"report": "none"}
    log = dry_run(tmp_path, deploy, data)
    wide = [line for line in log.splitlines() if len(line) > 100]
    assert not wide, "\n".join(wide)
    tables = table_rows(log)
    assert "--> Detected changes:" in tables, log
    for rows in tables.values():
        assert rows and (rows[0].split()[0] == "Operation" and len(rows) > 1
                         or rows[0].strip() == "no operations"), log


def test_undo_plans_the_host_and_the_timer(tmp_path):
    """Undo on a machine gpunode never applied: every step planned, none changes anything
    (no container record: no container step)."""
    log = dry_run(tmp_path, "deploy/undo.py", PINNED)
    assert not_planned(log, ("Stop and disable gpunode-verify.timer",
                             "Put back /usr/local/sbin/gpunode-verify",
                             "/var/lib/prometheus/node-exporter/gpunode.prom",
                             "Remove /var/lib/prometheus/node-exporter if gpunode",
                             "Remove /var/lib/gpunode")) == []
    assert "] change: " not in log


def test_operation_names_fit_pyinfras_operation_line(tmp_path):
    """'--> Starting operation: NAME ' (pyinfra prints it for each operation a run executes)
    within 100 columns: every name at most 75 characters, the deploy's included."""
    for deploy, data in (("deploy/site.py", {"gpunode": {**PINNED["gpunode"],
                                                         "nvidia_driver_change": True,
                                                         "pcie_acs_redirect": "off"}}),
                         ("deploy/undo.py", {}),
                         ("deploy/containers.py", {"gpunode_container": {
                             "nvidia_driver": "550.127.05", "gpus": 1}})):
        folder = tmp_path / Path(deploy).stem  # pyinfra caches a file's code by its path
        folder.mkdir()
        names = planned(dry_run(folder, deploy, data)).splitlines()
        assert names and not [n for n in names if len(n) > 75], (deploy, names)


def test_site_refuses_a_sysctl_key_this_kernel_lacks(tmp_path):
    """A misspelt key (vm.swapiness) is refused in --dry naming host and key (issue 28.7),
    unless allow_absent lists it; then it is only noted."""
    log = dry_run(tmp_path, "deploy/site.py",
                  {"gpunode": {"sysctls": {"vm.swapiness": "10"}}}, exit_code=1)
    assert "refused before any change" in log and "gpunode.sysctls.vm.swapiness" in log
    assert "allow_absent" in log
    (tmp_path / "allowed").mkdir()  # a new inventory file: pyinfra imports each path once
    allowed = {"sysctls": {"vm.swapiness": "10"}, "allow_absent": ["vm.swapiness"]}
    log = dry_run(tmp_path / "allowed", "deploy/host.py", {"gpunode": allowed})
    assert "not on this kernel, skipped: vm.swapiness" in log


def test_a_second_run_is_refused_while_another_holds_the_node(tmp_path, monkeypatch):
    """The real lock on this machine (issue 28.5; in a folder of its own: this test process's
    earlier deploys hold /run/gpunode/lock for their run): a process that holds it for
    another run; the deploy is refused before any change, naming that run."""
    import subprocess
    import sys

    import gpunode.facts.lock as lock
    from gpunode.facts.lock import lock_command

    monkeypatch.setattr(lock, "LOCK_DIR", str(tmp_path / "run-gpunode"))
    monkeypatch.setattr(lock, "LOCK_FILE", str(tmp_path / "run-gpunode" / "lock"))
    monkeypatch.setattr(lock, "LOCK_WAIT_S", 1)

    command = lock_command("0therrun", "run=0therrun controller=elsewhere")
    code = (f"import subprocess, time\nout = subprocess.run(['/bin/sh', '-c', {command!r}], "
            "capture_output=True, text=True).stdout\nprint(out, flush=True)\ntime.sleep(120)\n")
    holder = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and "taken" in holder.stdout.readline()
        log = dry_run(tmp_path, "deploy/host.py", {}, exit_code=1)
        words = " ".join(log.split())  # the refusal is wrapped to the terminal's width
        assert "refused before any change: another gpunode run holds" in words
        assert "run=0therrun controller=elsewhere" in words
    finally:
        holder.kill()
        holder.wait()


def test_site_refuses_hugepages_above_this_machines_memory(tmp_path):
    """vm.nr_hugepages against this machine's real /proc/meminfo, read in the one read only
    for such a profile (issue 28.7): 2 TiB of pages is refused in --dry, naming the fix."""
    from pathlib import Path

    from gpunode.facts.memory import parse_meminfo

    info = parse_meminfo(Path("/proc/meminfo").read_text().splitlines())
    pages = info["MemTotal"] // info["Hugepagesize"] + 1  # one page more than the memory
    log = dry_run(tmp_path, "deploy/host.py",
                  {"gpunode": {"sysctls": {"vm.nr_hugepages": str(pages)}}}, exit_code=1)
    assert "refused before any change" in log and "more than this host's memory" in log
