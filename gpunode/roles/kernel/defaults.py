"""kernel role defaults: the NodeProfile fields it reads.

| field       | default | why                                                              |
|-------------|---------|------------------------------------------------------------------|
| max_cstate  | 1       | cmdline half of the C-state cap (processor./intel_idle.max_cstate) |
| amd_pstate  | active  | AMD hosts ran acpi-cpufreq; amd_pstate needs the cmdline           |
| cmdline     | {}      | the user's own extra parameters (iommu=pt, ...)                    |
| kernel_pin  | None    | keep a tested kernel; the audited node ran one nine patches behind |
| bootloader  | auto    | GRUB vs systemd-boot, asked from proxmox-boot-tool                 |
| reboot      | False   | cmdline and kernel changes wait for a reboot the user allows       |
"""

from gpunode.roles.profile.node import NodeProfile

DEFAULTS = NodeProfile()
