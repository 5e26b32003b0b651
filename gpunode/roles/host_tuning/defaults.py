r"""host_tuning defaults: the NodeProfile fields this role reads. Each is documented once, in
the schema (gpunode/profile/node.py); the list below is generated from it (make docs).

<!-- gpunode:generated role:host_tuning -->
- modules (default `[nvidia_peermem]`): Kernel modules loaded now and at every boot
  (/etc/modules-load.d). nvidia_peermem (GPUDirect RDMA) is loaded only where an RDMA device
  exists, unless listed in required_modules. Why: GPUDirect RDMA not loaded. Now: `modprobe`. At
  boot: `/etc/modules-load.d/gpunode.conf`. Read back: `/sys/module/<name>`.
- required_modules (default `[]`): Modules that must load: a missing one fails the run instead
  of being reported as not applicable. Now: a listed module that can't load fails the run.
- max_read_request (default `4096`): PCIe MaxReadReq in bytes for the selected devices (audit:
  512). Why: MaxReadReq 512. Now: `setpci -s BDF CAP_EXP+8.w=5000:7000` (bits 14:12 only). At
  boot: `gpunode-tune.service` at boot. Read back: DevCtl via `lspci -vvv`.
- pcie_selector (default `vendor 10de, classes [0300, 0302]`): Devices whose MaxReadReq is set.
  Now: only matching functions are touched. At boot: same selector in the boot script.
- sysctls (default the keys below): sysctl key -> value. Given keys are merged over the
  defaults; a value of null removes a default. Keys are dotted names; values are integers or
  integers separated by spaces, except net.ipv4.tcp_congestion_control,
  net.ipv4.tcp_allowed_congestion_control and net.core.default_qdisc (names). Now: `sysctl -w`,
  read back from /proc/sys right after. At boot: `/etc/sysctl.d/90-gpunode.conf`. Read back:
  `/proc/sys/...`.
- sysctls.kernel.numa_balancing (default `0`):. Why: NUMA balancing on.
- sysctls.kernel.nmi_watchdog (default `0`):. Why: NMI watchdog on. Now: `sysctl -w`, best
  effort: a kernel without perf counters refuses it (reported as not supported here). At boot:
  `-kernel.nmi_watchdog` in the same file (a refusal is ignored at boot).
- sysctls.kernel.sched_autogroup_enabled (default `0`):. Why: autogroup on.
- sysctls.vm.swappiness (default `10`):. Why: swappiness 60.
- sysctls.net.core.rmem_max (default `134217728`):. Why: default socket buffers (NCCL over
  sockets).
- sysctls.net.core.wmem_max (default `134217728`):. Why: default socket buffers (NCCL over
  sockets).
- sysctls.net.core.rmem_default (default `16777216`):.
- sysctls.net.core.wmem_default (default `16777216`):.
- sysctls.net.core.netdev_max_backlog (default `250000`):.
- sysctls.net.ipv4.tcp_rmem (default `4096 87380 134217728`):.
- sysctls.net.ipv4.tcp_wmem (default `4096 65536 134217728`):.
- sysctls.net.ipv4.tcp_mtu_probing (default `1`):.
- max_cstate (default `1`): Deepest C-state allowed (0 = poll only, 1 = C1, up to 10). None
  leaves C-states alone. Why: C2 allowed (100 µs wake-up). Now: `cpuidle/stateN/disable` for
  deeper states. At boot: cmdline `processor.max_cstate=1` (+ `intel_idle.max_cstate=1` on
  Intel; `0` → `idle=poll`) + boot unit. Read back: cpuidle sysfs,
  `/sys/module/*/parameters/max_cstate`.
- cpu_governor (default `performance`): cpufreq scaling governor (one the kernel knows:
  performance, powersave, schedutil, ondemand, conservative, userspace); None leaves it alone.
  Now: `scaling_governor`. At boot: boot unit. Read back: sysfs.
- memlock (default `unlimited`): RLIMIT_MEMLOCK for the host: 'unlimited' or bytes (65536 up to
  2**50). Why: RLIMIT_MEMLOCK ~63 GB. Now: `systemctl daemon-reload` (systemd re-reads
  system.conf.d on reload). At boot: `/etc/security/limits.d/90-gpunode-memlock.conf` +
  `DefaultLimitMEMLOCK`. Read back: `systemctl show -p DefaultLimitMEMLOCK`.
- pcie_acs_redirect (default `keep`): off clears the ACS redirect bits (SrcValid, ReqRedir,
  CmpltRedir, UpstreamFwd, EgressCtrl) with a masked write of ECAP_ACS+0x6 on the bridges above
  the pcie_selector devices only, now and at every boot, so GPU peer-to-peer traffic stays in
  the PCIe switch. Cost: the IOMMU no longer isolates devices behind those bridges (their IOMMU
  groups are in effect one): not on hosts that pass devices to VMs. Why: ACS
  ReqRedir+/CmpltRedir+ above the GPUs: peer traffic through the root complex. Now: `off`:
  `setpci -s BRIDGE ECAP_ACS+0x6.w=0000:003d` (SrcValid, ReqRedir, CmpltRedir, UpstreamFwd,
  EgressCtrl) on the bridges above `pcie_selector` devices only. At boot: boot unit (sysfs
  parents of the matched devices). Read back: ACSCtl read back after each write.
- allow_absent (default `[]`): sysctl keys that may be missing from a host's /proc/sys (a module
  not loaded yet, another kernel): without this a key the host lacks is refused in --dry and in
  the run, naming host and key (a typo such as vm.swapiness).
- i_know (default `[]`): Dangerous settings you mean (names from gpunode.profile.danger.DANGERS:
  kernel.modprobe, kernel.randomize_va_space, fs.suid_dumpable, vm.nr_hugepages, cmdline.init,
  cmdline.root, cmdline.module_blacklist, cmdline.modprobe.blacklist, pcie_selector.bridges):
  without the name the profile is refused.
<!-- /gpunode:generated -->
"""

from gpunode.profile.node import DEFAULT_SYSCTLS, NodeProfile, PcieSelector

SCHEMA = NodeProfile
READS = ("modules", "required_modules", "max_read_request", "pcie_selector", "sysctls",
         "max_cstate", "cpu_governor", "memlock", "pcie_acs_redirect", "allow_absent", "i_know")
DEFAULTS = NodeProfile()

__all__ = ["DEFAULTS", "DEFAULT_SYSCTLS", "READS", "SCHEMA", "NodeProfile", "PcieSelector"]
