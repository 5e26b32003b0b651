r"""nvidia_driver defaults: the NodeProfile fields it reads. Each is documented once, in the
schema (gpunode/profile/node.py); the list below is generated from it (make docs).

<!-- gpunode:generated role:nvidia_driver -->
- nvidia_driver (default `null`): NVIDIA driver version to hold, e.g. '550.127.05'; None = no
  pin. At boot: apt preferences pin + apt hold; a mismatch is reported. Read back:
  `/proc/driver/nvidia/version`.
- nvidia_driver_change (default `false`): Allow installing the pinned driver when another
  version is installed (otherwise the mismatch is only reported). Now: allow installing the
  pinned driver.
- nvidia_driver_containers (default `[]`): Proxmox containers (VMIDs, in start order) whose
  NVIDIA user-space libraries follow the host's driver: a change of nvidia_driver (with
  nvidia_driver_change) switches them in the same run as the host, or none of them
  (docs/upgrade.md). Now: `pct exec VMID -- apt-get install PKG=VER` in each, read back with
  dpkg-query, held.
- nvidia_driver_drain (default `refuse`): What a driver change does while processes hold
  /dev/nvidia*: refuse (nothing changed, the processes named), or stop-containers (pct stop the
  nvidia_driver_containers holding GPU devices in reverse start order, pct start the same ones
  after). Host processes are never stopped. Now: checked at plan time and again in the switch's
  script.
- nvidia_packages (default `null`): Driver packages to install when nvidia_driver_change allows
  it and no NVIDIA package is installed yet. None = chosen by nvidia_kernel_modules and
  nvidia_repository: Debian nvidia-driver + nvidia-open-kernel-dkms (open) or nvidia-kernel-dkms
  (proprietary); CUDA repository nvidia-open or cuda-drivers. Now: what to install when none is
  installed; `null` = the flavour's packages for `nvidia_repository`.
- nvidia_repository (default `debian`): Where the driver packages come from, for their names:
  debian (Debian's non-free/contrib) or cuda (NVIDIA's CUDA repository). Now: package names:
  `debian` (non-free/contrib) or `cuda` (NVIDIA's CUDA repository).
- nvidia_kernel_modules (default `auto`): NVIDIA kernel module flavour. auto = open wherever
  every GPU supports it (Turing and newer; Blackwell runs only on open), proprietary for older
  GPUs. The loaded flavour (/proc/driver/nvidia/version, modinfo license) is read and a mismatch
  reported; the flavour's packages are installed only when nvidia_driver_change allows it. Why:
  Blackwell on the proprietary modules does not start; Turing+ should use open. Now: only
  reported; with `nvidia_driver_change` the flavour's packages are installed: Debian
  `nvidia-driver` + `nvidia-open-kernel-dkms` / `nvidia-kernel-dkms`, CUDA repo `nvidia-open` /
  `cuda-drivers`. At boot: the module the next boot loads. Read back:
  `/proc/driver/nvidia/version` ("Open Kernel Module"), `modinfo nvidia` license (`Dual MIT/GPL`
  / `NVIDIA`).
<!-- /gpunode:generated -->
"""

from gpunode.profile.node import NodeProfile

SCHEMA = NodeProfile
READS = ("nvidia_driver", "nvidia_driver_change", "nvidia_driver_containers",
         "nvidia_driver_drain", "nvidia_packages", "nvidia_repository",
         "nvidia_kernel_modules")
DEFAULTS = NodeProfile()
