r"""kernel role defaults: the NodeProfile fields it reads. Each is documented once, in the
schema (gpunode/profile/node.py); the list below is generated from it (make docs).

<!-- gpunode:generated role:kernel -->
- max_cstate (default `1`): Deepest C-state allowed (0 = poll only, 1 = C1, up to 10). None
  leaves C-states alone. Why: C2 allowed (100 µs wake-up). Now: `cpuidle/stateN/disable` for
  deeper states. At boot: cmdline `processor.max_cstate=1` (+ `intel_idle.max_cstate=1` on
  Intel; `0` → `idle=poll`) + boot unit. Read back: cpuidle sysfs,
  `/sys/module/*/parameters/max_cstate`.
- amd_pstate (default `active`): amd_pstate mode put on the cmdline of AMD hosts (audit:
  acpi-cpufreq was in use). Ignored on Intel. Why: acpi-cpufreq instead of amd_pstate. At boot:
  cmdline `amd_pstate=active` (AMD only). Read back:
  `/sys/devices/system/cpu/amd_pstate/status`.
- cmdline (default `{}`): Extra kernel cmdline parameters: key -> value, or null for a bare
  flag. Values: letters, digits and _ . , : / = + - @ % ~ (no spaces, quotes or $), up to 256
  characters. At boot: your own `key: value` (or `key: null` flag). Read back: `/proc/cmdline`.
- kernel_pin (default `null`): Kernel to keep: a kernel release such as '6.8.12-4-pve' or
  '6.12.117+deb13-amd64', 'running', or None for no pin. Why: kernel nine patches behind. At
  boot: Proxmox: `proxmox-boot-tool kernel pin`; Debian: `GRUB_DEFAULT`; apt hold of the kernel
  package. Read back: `uname -r`.
- bootloader (default `auto`): How the cmdline is persisted; auto asks proxmox-boot-tool. Now:
  `auto` asks `proxmox-boot-tool status`: systemd-boot → `/etc/kernel/cmdline` +
  `proxmox-boot-tool refresh`, else `/etc/default/grub` + `update-grub`.
- reboot (default `false`): Allow the deploy to reboot to apply cmdline/kernel changes. Now:
  reboot (pyinfra `server.reboot`) when cmdline/kernel are not live yet; otherwise "pending
  reboot".
- reboot_timeout (default `900`): Seconds to wait for the host to come back after a reboot
  (30-7200); a host that doesn't fails the run with its name. Now: how long the reboot may take
  before the run fails naming the host.
<!-- /gpunode:generated -->
"""

from gpunode.profile.node import NodeProfile

SCHEMA = NodeProfile
READS = ("max_cstate", "amd_pstate", "cmdline", "kernel_pin", "bootloader", "reboot",
         "reboot_timeout")
DEFAULTS = NodeProfile()
