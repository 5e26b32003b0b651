r"""lxc_gpu defaults: the fields of one declared container (ContainerSpec), from the Proxmox
host's data key ``gpunode_containers`` (a list of mappings, one per container). Each is
documented once, in the schema (gpunode/profile/container/spec.py); the list below is
generated from it (make docs). GPU lines are computed from the host's /proc/devices and
/dev/nvidia* (gpunode/roles/lxc_gpu/passthrough.py), never hard-coded.

<!-- gpunode:generated role:lxc_gpu -->
- vmid (default required): Proxmox guest id (100..999999999; ids below 100 are reserved). Unique
  in the whole cluster, VMs included.
- hostname (default required): Container hostname: one RFC 1123 label (letters, digits, '-',
  1-63 chars, no leading/trailing '-'). Also how gpunode recognises the container when the vmid
  already exists.
- ostemplate (default required): Template volume, 'STORAGE:vztmpl/FILE.tar.zst' (or
  .tar.gz/.tar.xz), e.g. 'local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst'. Used only by
  pct create; `pveam available` lists them, `pveam download` fetches one.
- cores (default `8`): CPU cores (pct --cores). Inference servers want a few per GPU for
  tokenisation and the HTTP front end. Why: tokenisation + HTTP front end per GPU set. Now: `pct
  create --cores`, then `pct set`.
- memory (default `32768`): RAM in MiB (pct --memory). Loading a model stages weights in host
  RAM: size this above the largest model file. Why: model weights are staged in host RAM. Now:
  `pct create --memory`, then `pct set`.
- swap (default `0`): Swap in MiB (pct --swap). 0 by default: swapping pinned inference buffers
  only hides memory pressure as latency. Why: swapping pinned buffers hides memory pressure.
  Now: `pct create --swap`, then `pct set`.
- rootfs_storage (default `local-lvm`): Proxmox storage id for the root disk (pct --rootfs
  STORAGE:SIZE). Why: Proxmox's default container storage. Now: `pct create --rootfs
  STORAGE:SIZE`.
- rootfs_size_gb (default `64`): Root disk size in GiB. It can grow later (pct resize), never
  shrink. Why: grows with `pct resize`, never shrinks. Now: `pct resize` to grow; a smaller size
  is refused.
- net0 (default `name=eth0,bridge=vmbr0,ip=dhcp`): First network interface in Proxmox
  property-string syntax (name=,bridge=,ip=,gw=,ip6=,tag=,firewall=,mtu=...). Proxmox adds
  hwaddr and type itself; gpunode keeps the existing hwaddr when it changes net0. Each value is
  checked as Proxmox does: interface names, IPv4/IPv6 addresses with prefix (or
  dhcp/manual/auto), VLAN tag 1-4094, mtu 64-65535, 0/1 flags. Why: Proxmox's default bridge; an
  existing hwaddr is kept. Now: `pct create --net0`, then `pct set`.
- unprivileged (default `true`): Run the container unprivileged (root inside is not root on the
  host). Fixed at creation: Proxmox can't change it afterwards. Why: root inside is not root on
  the host. Now: `pct create` only: Proxmox can't change it later (refused).
- features (default `nesting=1`): pct --features property string (nesting=1 lets systemd in
  Debian 12+ containers sandbox its services; keyctl=1 for Docker in unprivileged containers).
  Values 0 or 1; mount= file system types separated by ';'. Why: systemd in Debian 12+
  containers wants nesting. Now: `pct create --features`, then `pct set`.
- onboot (default `true`): Start the container when the Proxmox host boots. Why: an inference
  server comes back after a host boot. Now: `pct set --onboot`.
- gpus (default `all`): Which GPUs the container gets: 'all', or a list of indices N of
  /dev/nvidiaN on the host (the device minor, not always the nvidia-smi order). Now: GPU lines
  computed from the host's /proc/devices and /dev/nvidia*, never hard-coded.
- memlock (default `unlimited`): lxc.prlimit.memlock: 'unlimited' or a byte count (up to 2**50).
  CUDA pins host memory; the limit can't be raised from inside the container. Why: CUDA pins
  host memory; only the host can raise the container's limit. Now: `lxc.prlimit.memlock` in
  /etc/pve/lxc/VMID.conf.
- gpu_passthrough (default `auto`): How the GPU nodes are passed: 'dev' as Proxmox devN keys
  (dev0: /dev/nvidia0; Proxmox creates the node and allows it), 'mount' as lxc.mount.entry bind
  mounts plus lxc.cgroup2.devices.allow lines, 'auto' devN where the host's Proxmox has them
  (pve-manager 8.2 or later), else mount. A node passed either way, or by the user's own mount
  of it, counts as passed; 'dev'/'mount' also rewrite gpunode's own lines of the other style.
  Now: a node missing on the host gets an optional mount instead of `devN` (Proxmox won't start
  with a missing devN path); `dev` on a Proxmox older than 8.2 is refused before any change.
- cpuset_cpus (default `auto`): lxc.cgroup2.cpuset.cpus: 'auto' = the CPUs of the NUMA node(s)
  of the container's GPUs (from /sys/bus/pci/devices/BDF/numa_node and the node's cpulist;
  nothing is set on a single-node host), a CPU list such as '0-15,32-47', or None to leave the
  key alone. A fixed cpuset also stops pvestatd moving the container's threads to other CPUs;
  'cores' then no longer picks them (the container runs on the whole cpuset). Why: a fixed
  cpuset keeps the container on its GPUs' NUMA node and stops pvestatd rebalancing it over the
  whole host. Now: GPU index -> BDF from `/proc/driver/nvidia/gpus/*/information`, its NUMA
  node's `cpulist`; a given list is checked against the host's CPUs.
- cpuset_mems (default `auto`): lxc.cgroup2.cpuset.mems: 'auto' = the NUMA node(s) of the
  container's GPUs, a node list such as '1' or '0-1', or None to leave the key alone. Now: a
  given node list is checked against the host's NUMA nodes.
- extra_lxc (default `[]`): More raw lines for /etc/pve/lxc/VMID.conf, each 'lxc.key: value'
  with a key Proxmox accepts (lxc.cgroup2.*, lxc.mount.entry, lxc.idmap, ...; not the cgroup v1
  lxc.cgroup.*, ignored on cgroup v2 hosts such as Proxmox VE 9). They are added if missing;
  NVIDIA mounts and memlock come from 'gpus' and 'memlock'. Mount paths must be normalised (no
  '..'). lxc.hook.* lines are accepted and run their command on the Proxmox host as root at
  every container start: the dry run lists them. Now: each line added to /etc/pve/lxc/VMID.conf
  when missing.
- i_know (default `[]`): Dangerous extra_lxc lines you mean: 'lxc.cgroup2.devices.allow' (for
  'a': every host device) and 'lxc.apparmor.profile' (for 'unconfined'); without the name such a
  line is refused.
- restart_allowed (default `false`): May gpunode restart the running container to apply changes
  that only take effect at start (raw lxc.* lines, [pve:pending] options)? If not, the run
  reports 'pending restart' and changes nothing else. Why: a restart stops the model server: opt
  in; otherwise the run reports "pending restart". Now: `pct reboot` when the running container
  lacks declared lines or has options waiting in [pve:pending].
- nvidia_driver (default `null`): NVIDIA driver version for the container's user-space
  libraries, e.g. '550.127.05'. It must equal the host's driver exactly (else 'NVML:
  Driver/library version mismatch'); None means: use the host's version. Why: the libraries must
  equal the host's module exactly, else "NVML: Driver/library version mismatch".
<!-- /gpunode:generated -->
"""

from gpunode.profile.container import ContainerSpec
from gpunode.profile.container.declared import CONTAINERS_DATA_KEY

SCHEMA = ContainerSpec
READS = tuple(ContainerSpec.model_fields)
DEFAULTS = {
    name: field.default
    for name, field in ContainerSpec.model_fields.items()
    if not field.is_required() and field.default_factory is None
} | {"extra_lxc": []}

__all__ = ["CONTAINERS_DATA_KEY", "DEFAULTS", "READS", "SCHEMA", "ContainerSpec"]
