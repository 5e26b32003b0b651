"""What to do for one declared container, from the host's facts: a pure plan.

The role's operations only carry this plan out, so every decision is tested here:

- container absent: ``pct create`` (stopped), append the GPU and extra lxc.* lines
  to the fresh config (a new file has no snapshot or pending section, so an append
  is safe there and only there), then ``pct start``.
- container present: rewrite /etc/pve/lxc/VMID.conf with the edited lxc.* lines
  (main section only, see ``pve_config``), *then* ``pct set`` for the options
  that differ (``pct set`` re-reads the file and keeps raw lxc.* lines, whereas a
  file computed before ``pct set`` would undo it), then ``pct resize`` to grow.
- running container whose raw lines changed, or with options waiting in
  ``[pve:pending]``: ``pct reboot`` when ``restart_allowed``, else the run reports
  ``pending restart``. A stopped container picks everything up at its next start.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from roles.lxc_gpu import pve_config
from roles.lxc_gpu.passthrough import DeviceNode, gpu_passthrough_lines, gpunode_owns
from roles.profile.container import (
    ContainerSpec,
    immutable_mismatches,
    pct_create_args,
    pct_resize_args,
    pct_set_args,
)

__all__ = ["ContainerPlan", "desired_lxc_lines", "edit_config_text", "plan_container"]

# Options Proxmox can't apply to a running container: pct set parks them in
# [pve:pending] (PVE::LXC::Config::vmconfig_hotplug_pending).
_NOT_HOTPLUGGED = ("--features", "--unprivileged")


@dataclass
class ContainerPlan:
    vmid: int
    create: list[str] = field(default_factory=list)
    append_lines: list[str] = field(default_factory=list)
    new_config_text: str | None = None
    set_args: list[str] = field(default_factory=list)
    resize_args: list[str] = field(default_factory=list)
    start: bool = False
    restart: list[str] = field(default_factory=list)
    pending_restart: bool = False
    problems: list[str] = field(default_factory=list)

    @property
    def changes(self) -> bool:
        return bool(
            self.create
            or self.new_config_text is not None
            or self.set_args
            or self.resize_args
            or self.start
            or self.restart
        )

    @property
    def status(self) -> str:
        if self.problems:
            return "error"
        if self.pending_restart:
            return "pending restart"
        return "changed" if self.changes else "ok"


def desired_lxc_lines(
    spec: ContainerSpec, majors: dict[str, int], devices: Sequence[DeviceNode]
) -> list[tuple[str, str]]:
    """The GPU block gpunode owns for this container."""
    return gpu_passthrough_lines(devices, majors, spec.gpu_indices, memlock=spec.memlock)


def edit_config_text(
    text: str,
    spec: ContainerSpec,
    majors: dict[str, int],
    devices: Sequence[DeviceNode],
) -> str:
    """The container config with gpunode's lines converged; equal to ``text`` when
    nothing needs to change."""
    config = pve_config.parse_pve_lxc_config(text)
    config = pve_config.with_raw_lxc_lines(
        config, desired_lxc_lines(spec, majors, devices), gpunode_owns(majors)
    )
    for key, value in spec.extra_lxc_entries:
        config = pve_config.with_lxc_entry(config, key, value)
    return pve_config.render(config)


def plan_container(
    spec: ContainerSpec,
    config_text: str | None,
    running: bool,
    majors: dict[str, int],
    devices: Sequence[DeviceNode],
) -> ContainerPlan:
    """Plan one container. ``config_text`` is /etc/pve/lxc/VMID.conf (None: absent)."""
    plan = ContainerPlan(vmid=spec.vmid)
    lines = desired_lxc_lines(spec, majors, devices) + spec.extra_lxc_entries

    if config_text is None:
        plan.create = pct_create_args(spec)
        plan.append_lines = [f"{k}: {v}" for k, v in lines]
        plan.start = True
        return plan

    config = pve_config.parse_pve_lxc_config(config_text)
    current = pve_config.main_options(config)
    plan.problems = immutable_mismatches(spec, current)
    if plan.problems:
        return plan

    new_text = edit_config_text(config_text, spec, majors, devices)
    raw_changed = new_text != config_text
    if raw_changed:
        plan.new_config_text = new_text
    plan.set_args = pct_set_args(spec, current)
    plan.resize_args = pct_resize_args(spec, current)

    if running:
        parks = any(arg in _NOT_HOTPLUGGED for arg in plan.set_args)
        waiting = bool(pve_config.pending_options(config))
        if raw_changed or parks or waiting:
            if spec.restart_allowed:
                plan.restart = ["pct", "reboot", str(spec.vmid)]
            else:
                plan.pending_restart = True
    return plan
