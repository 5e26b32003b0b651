"""lxc_gpu role: Proxmox LXC containers with NVIDIA GPUs, on the Proxmox host.

What it changes and why:

- creates a declared container with ``pct create`` when it doesn't exist, else
  converges its options with ``pct set`` (``roles.profile.container``);
- gives it the GPUs through raw ``lxc.*`` lines in /etc/pve/lxc/VMID.conf, computed
  from the host's /proc/devices and /dev/nvidia* (``passthrough``): Proxmox's API
  can't set raw lxc keys, so the file is edited, keeping every line it doesn't own,
  the description comments and the [snapshot]/[pve:pending] sections (``pve_config``);
- restarts a running container to apply such changes only when the spec allows it,
  otherwise reports "pending restart" (``plan``).

The ``@pct/HOST:VMID`` connector (``connector``) then runs operations inside the
container through ``pct exec``.
"""
