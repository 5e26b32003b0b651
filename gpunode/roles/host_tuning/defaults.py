"""host_tuning defaults: the NodeProfile fields this role reads, with their defaults and why.

| field            | default            | why (figure from the audit of the slow node)            |
|------------------|--------------------|---------------------------------------------------------|
| modules          | [nvidia_peermem]   | GPUDirect RDMA was not loaded: NCCL fell back to sockets|
| max_read_request | 4096               | PCIe MaxReadReq was stuck at 512 bytes                  |
| pcie_selector    | 10de, class 0300/0302 | only NVIDIA GPUs are touched                          |
| sysctls          | DEFAULT_SYSCTLS    | numa_balancing on, nmi_watchdog on, autogroup on,       |
|                  |                    | swappiness 60, default socket buffers                   |
| max_cstate       | 1                  | C2 with 100 us wake-up latency was allowed              |
| cpu_governor     | performance        | frequency ramp-up between decode steps                  |
| amd_pstate       | active             | acpi-cpufreq was the driver instead of amd_pstate       |
| memlock          | unlimited          | RLIMIT_MEMLOCK was ~63 GB                               |

The profile model itself (gpunode/roles/profile/node.py) documents each field.
"""

from gpunode.roles.profile.node import DEFAULT_SYSCTLS, NodeProfile, PcieSelector

DEFAULTS = NodeProfile()

__all__ = ["DEFAULTS", "DEFAULT_SYSCTLS", "NodeProfile", "PcieSelector"]
