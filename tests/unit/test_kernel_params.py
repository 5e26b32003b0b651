"""sysctl / modules / memlock parsing and the module plan."""

import subprocess
from pathlib import Path

from gpunode.facts.kernel_params import (
    SYSCTL_REFUSED_DIR,
    kernel_params_command,
    parse_kernel_params,
    parse_limits_memlock,
    sysctl_refused_command,
)
from gpunode.ops.modules import plan_modules
from gpunode.ops.sysctl import sysctl_changes
from tests.unit._sections import sections_text

# /proc/1/limits layout (rows trimmed); 8388608 is systemd 252's default memlock.
PROC_LIMITS = """Limit                     Soft Limit           Hard Limit           Units
Max cpu time              unlimited            unlimited            seconds
Max locked memory         8388608              8388608              bytes
Max address space         unlimited            unlimited            bytes
"""


def test_parse_kernel_params():
    state = parse_kernel_params(sections_text(
        sysctl="==> /proc/sys/kernel/numa_balancing <==\n1\n\n"
               "==> /proc/sys/net/ipv4/tcp_rmem <==\n4096\t131072\t6291456",
        modules="tcp_bbr 20480 0 - Live 0x0\next4 1 2 - Live 0x0\nblock\nnvidia_peermem",
        available="tcp_bbr",
        rdma="",
        memlock_pid1=PROC_LIMITS,
        memlock_default="8388608",
        memlock_session="8192",
    ))
    assert state.sysctls == {"kernel.numa_balancing": "1",
                             "net.ipv4.tcp_rmem": "4096 131072 6291456"}
    assert {"tcp_bbr", "ext4", "block", "nvidia_peermem"} <= set(state.loaded_modules)
    assert state.available_modules == ["tcp_bbr"]
    assert state.rdma_devices == []
    assert state.memlock_pid1 == "8388608"
    assert state.memlock_default == "8388608"


def test_limits_memlock_unlimited():
    assert parse_limits_memlock(PROC_LIMITS.replace("8388608  ", "unlimited")) == "unlimited"
    assert parse_limits_memlock("") is None


def test_sysctl_changes_skip_missing_keys_and_fold_whitespace():
    live = {"vm.swappiness": "60", "net.ipv4.tcp_rmem": "4096 87380 134217728"}
    wanted = {"vm.swappiness": "10", "net.ipv4.tcp_rmem": "4096  87380 134217728",
              "kernel.numa_balancing": "0"}
    assert sysctl_changes(live, wanted) == {"vm.swappiness": "10"}


def test_module_plan_peermem_without_rdma_is_not_applicable():
    state = parse_kernel_params(sections_text(modules="", available="nvidia_peermem tcp_bbr",
                                          rdma=""))
    plan = plan_modules(state, ["nvidia_peermem", "tcp_bbr", "nope"], [])
    assert plan.load == ["tcp_bbr"]
    assert "no RDMA" in plan.not_applicable["nvidia_peermem"]
    assert "not available" in plan.not_applicable["nope"]
    assert plan.persist == ["tcp_bbr"]


def test_module_plan_peermem_with_rdma_loads_and_required_missing_is_flagged():
    state = parse_kernel_params(sections_text(modules="", available="nvidia_peermem",
                                          rdma="mlx5_0\nmlx5_1"))
    plan = plan_modules(state, ["nvidia-peermem", "nvidia_uvm"], ["nvidia_uvm"])
    assert plan.load == ["nvidia_peermem"]
    assert "not available" in plan.missing_required["nvidia_uvm"]


def test_sysctls_are_read_in_one_process_from_this_kernel():
    """The real command on this machine's /proc/sys: a key not on the kernel and a
    write-only one (vm.drop_caches) are absent, tabs are folded, each value is the file's."""
    keys = ["vm.swappiness", "net.ipv4.tcp_rmem", "kernel.no_such_key", "vm.drop_caches"]
    command = kernel_params_command(keys, [])
    out = subprocess.run(["sh", "-c", command], capture_output=True, text=True).stdout
    sysctls = parse_kernel_params(out).sysctls
    assert sysctls == {
        "vm.swappiness": Path("/proc/sys/vm/swappiness").read_text().strip(),
        "net.ipv4.tcp_rmem": " ".join(Path("/proc/sys/net/ipv4/tcp_rmem").read_text().split()),
    }


def test_refused_sysctls_are_read_with_shell_builtins(tmp_path):
    (tmp_path / "vm.swappiness").write_text("10\n")
    (tmp_path / "net.core.rmem_max").write_text("16777216")  # no final newline
    command = sysctl_refused_command().replace(SYSCTL_REFUSED_DIR, str(tmp_path))
    out = subprocess.run(["sh", "-c", command], capture_output=True, text=True).stdout
    assert sorted(out.splitlines()) == ["net.core.rmem_max=16777216", "vm.swappiness=10"]
