"""The runtime sysctl write is confirmed by reading the value back, not by sysctl's exit status.

The command gpunode sends runs here in a real shell against a stand-in kernel: a `sysctl` on
PATH that either stores the value in the stand-in /proc/sys file (a kernel that accepts it) or,
like kernel 6.12 for kernel.nmi_watchdog without perf counters, prints "Operation not
permitted" and exits 0 while the value stays.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from gpunode.ops import sysctl as sysctl_op

ACCEPTING = """#!/bin/sh
[ "$1" = -q ] && shift; [ "$1" = -w ] && shift
key=${1%%=*}; printf '%s\\n' "${1#*=}" > "$PROC/$key"
"""
# The kernel's own spelling of multi-value keys: tab-separated (tcp_rmem reads 4096\t87380...).
ACCEPTING_WITH_TABS = """#!/bin/sh
[ "$1" = -q ] && shift; [ "$1" = -w ] && shift
key=${1%%=*}; printf '%s\\n' "${1#*=}" | tr ' ' '\\t' > "$PROC/$key"
"""
REFUSING = """#!/bin/sh
echo "sysctl: setting key \\"kernel.nmi_watchdog\\": Operation not permitted" >&2
exit 0
"""


def run_write(tmp_path: Path, monkeypatch, kernel: str, key: str, value: str, live: str,
              best_effort: bool) -> subprocess.CompletedProcess:
    proc, refused, bin_dir = tmp_path / "proc", tmp_path / "refused", tmp_path / "bin"
    for folder in (proc, bin_dir):
        folder.mkdir()
    (proc / key).write_text(live + "\n")
    fake = bin_dir / "sysctl"
    fake.write_text(kernel)
    fake.chmod(0o755)
    monkeypatch.setattr(sysctl_op, "sysctl_path", lambda k: str(proc / k))
    monkeypatch.setattr(sysctl_op, "SYSCTL_REFUSED_DIR", str(refused))
    command = sysctl_op.write_and_verify_command(key, value, best_effort)
    return subprocess.run(["sh", "-c", command], capture_output=True, text=True,
                          env={"PATH": f"{bin_dir}:/usr/bin:/bin", "PROC": str(proc)})


def test_accepted_write_reads_back_and_passes(tmp_path, monkeypatch):
    run = run_write(tmp_path, monkeypatch, ACCEPTING, "net.ipv4.tcp_rmem",
                    "4096 87380 134217728", "4096\t131072\t6291456", best_effort=False)
    assert run.returncode == 0, run.stderr
    assert (tmp_path / "proc" / "net.ipv4.tcp_rmem").read_text() == "4096 87380 134217728\n"


def test_read_back_folds_the_kernels_tabs(tmp_path, monkeypatch):
    run = run_write(tmp_path, monkeypatch, ACCEPTING_WITH_TABS, "net.ipv4.tcp_rmem",
                    "4096 87380 134217728", "4096\t131072\t6291456", best_effort=False)
    assert run.returncode == 0, run.stderr
    assert (tmp_path / "proc" / "net.ipv4.tcp_rmem").read_text() == "4096\t87380\t134217728\n"


def test_write_kept_by_kernel_with_exit_0_fails_the_operation(tmp_path, monkeypatch):
    run = run_write(tmp_path, monkeypatch, REFUSING, "kernel.numa_balancing", "0", "1",
                    best_effort=False)
    assert run.returncode == 1
    assert "did not accept kernel.numa_balancing=0 (reads 1)" in run.stderr


def test_best_effort_refusal_is_recorded_and_reported(tmp_path, monkeypatch):
    run = run_write(tmp_path, monkeypatch, REFUSING, "kernel.nmi_watchdog", "0", "1",
                    best_effort=True)
    assert run.returncode == 0
    assert "kernel refused kernel.nmi_watchdog=0 (reads 1): not supported here" in run.stderr
    assert (tmp_path / "refused" / "kernel.nmi_watchdog").read_text() == "0\n"


@pytest.mark.parametrize("best_effort", [True, False])
def test_command_is_valid_shell(best_effort):
    command = sysctl_op.write_and_verify_command("net.core.rmem_max", "134217728", best_effort)
    subprocess.run(["bash", "-n", "-c", command], check=True)


@pytest.mark.parametrize("key", ["vm.swappiness", "net.ipv4.tcp_rmem"])
def test_read_back_reads_this_kernels_proc_sys_whole(tmp_path, key):
    """The read-back on this machine's real /proc/sys, where a read at an offset is EOF (the
    shell's byte-a-call read would see '6' of '60'): a sysctl that writes nothing, and the
    wanted value the live one, must pass."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sysctl").write_text("#!/bin/sh\nexit 0\n")
    (bin_dir / "sysctl").chmod(0o755)
    live = " ".join(Path(sysctl_op.sysctl_path(key)).read_text().split())
    command = sysctl_op.write_and_verify_command(key, live, best_effort=False)
    run = subprocess.run(["sh", "-c", command], capture_output=True, text=True,
                         env={"PATH": f"{bin_dir}:/usr/bin:/bin"})
    assert run.returncode == 0, run.stderr
