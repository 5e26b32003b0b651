"""The default sysctls of the inference profile and what each one answers.

Documented here with NodeProfile.sysctls (its default and, per key, the audit finding):
gpunode/profile/node.py reads them.
"""

from __future__ import annotations

from gpunode.profile.allowed import SYSCTL_KEY, check_sysctl_value, shown
from gpunode.profile.docs import SettingDoc, setting_doc

# Sized for NCCL's socket transport on 100-400 Gb/s links (NCCL falls back to sockets
# without RDMA): 128 MiB socket buffers let one TCP stream fill a fat pipe at high RTT;
# the tcp_* triples are min/default/max and autotuning grows into the max.
NCCL_SOCKET_BUFFER_BYTES = 134217728

DEFAULT_SYSCTLS: dict[str, str] = {
    # Automatic NUMA balancing migrates pages under the GPUs' pinned buffers: off.
    "kernel.numa_balancing": "0",
    # The NMI watchdog fires a perf interrupt on every CPU every few seconds: off.
    "kernel.nmi_watchdog": "0",
    # Autogroup regroups inference workers by session and skews their CPU share: off.
    "kernel.sched_autogroup_enabled": "0",
    # Keep model weights and KV cache staging buffers in RAM.
    "vm.swappiness": "10",
    "net.core.rmem_max": str(NCCL_SOCKET_BUFFER_BYTES),
    "net.core.wmem_max": str(NCCL_SOCKET_BUFFER_BYTES),
    "net.core.rmem_default": "16777216",
    "net.core.wmem_default": "16777216",
    "net.core.netdev_max_backlog": "250000",
    "net.ipv4.tcp_rmem": f"4096 87380 {NCCL_SOCKET_BUFFER_BYTES}",
    "net.ipv4.tcp_wmem": f"4096 65536 {NCCL_SOCKET_BUFFER_BYTES}",
    "net.ipv4.tcp_mtu_probing": "1",
}

# Keys whose write the kernel may refuse on some hardware (no perf counters: ENOTSUPP).
BEST_EFFORT_SYSCTLS = frozenset({"kernel.nmi_watchdog"})

# What each default sysctl answers (the audit of the slow node), documented with the field.
_BUFFERS = SettingDoc(why="default socket buffers (NCCL over sockets)")
SYSCTLS_DOC = setting_doc(
    runtime="`sysctl -w`, read back from /proc/sys right after",
    persistence="`/etc/sysctl.d/90-gpunode.conf`",
    readback="`/proc/sys/...`",
    entries={
        "kernel.numa_balancing": SettingDoc(why="NUMA balancing on"),
        "kernel.nmi_watchdog": SettingDoc(
            why="NMI watchdog on",
            runtime="`sysctl -w`, best effort: a kernel without perf counters refuses it "
            "(reported as not supported here)",
            persistence="`-kernel.nmi_watchdog` in the same file (a refusal is ignored at boot)",
        ),
        "kernel.sched_autogroup_enabled": SettingDoc(why="autogroup on"),
        "vm.swappiness": SettingDoc(why="swappiness 60"),
        "net.core.rmem_max": _BUFFERS,
        "net.core.wmem_max": _BUFFERS,
    },
)


def merged_sysctls(value: object) -> dict[str, str]:
    """NodeProfile.sysctls: the given keys over DEFAULT_SYSCTLS (None removes a default),
    each key a dotted name, each value checked (check_sysctl_value)."""
    if not isinstance(value, dict):
        raise ValueError("give a mapping of sysctl key -> value")
    if len(value) > 256:
        raise ValueError(f"{len(value)} sysctls: at most 256")
    merged = dict(DEFAULT_SYSCTLS)
    for key, item in value.items():
        if not isinstance(key, str) or not SYSCTL_KEY.fullmatch(key) or len(key) > 128:
            raise ValueError(f"{shown(key)} is not a sysctl key such as 'vm.swappiness'")
        if item is None:
            merged.pop(key, None)
        elif isinstance(item, bool) or not isinstance(item, (str, int)):
            raise ValueError(f"{key}: {shown(item)} is not a sysctl value (string or integer)")
        else:
            merged[key] = check_sysctl_value(key, str(item))
    return merged
