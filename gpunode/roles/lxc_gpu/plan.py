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

``restart_reasons`` reads that last rule from the live node rather than from what this
run changed: it compares the lines the container should run with against
/var/lib/lxc/VMID/config, the LXC config ``pct start`` generated for the running
container. A restart that was refused stays "pending restart" on every later run
until the container is restarted.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from gpunode.roles.lxc_gpu import pve_config
from gpunode.roles.lxc_gpu.passthrough import DeviceNode, gpu_passthrough_lines, gpunode_owns
from gpunode.roles.profile.container import (
    ContainerSpec,
    cgroup_v1_warning,
    immutable_mismatches,
    pct_create_args,
    pct_resize_args,
    pct_set_args,
)

__all__ = [
    "ContainerPlan",
    "desired_lxc_lines",
    "edit_config_text",
    "lxc_line",
    "parse_lxc_line",
    "plan_container",
    "restart_reasons",
]

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
    warnings: list[str] = field(default_factory=list)
    """Reported, not changed: cgroup v1 lines of the user's (LXC ignores them on cgroup v2)."""

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
    legacy = pve_config.cgroup_v1_entries(config)
    if legacy:
        plan.warnings.append(cgroup_v1_warning(spec.vmid, legacy))
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


def lxc_line(key: str, value: str) -> str:
    """``("lxc.prlimit.memlock", "unlimited")`` -> ``"lxc.prlimit.memlock: unlimited"``."""
    return f"{key}: {value}"


def parse_lxc_line(line: str) -> tuple[str, str]:
    """``"lxc.key: value"`` or ``"lxc.key = value"`` -> (key, value); ValueError if not."""
    parsed = pve_config.parse_pve_lxc_config(line.strip() + "\n").main.lines[0]
    if not parsed.is_lxc:
        raise ValueError(f"not an lxc.* line: {line!r}")
    return parsed.key or "", parsed.value or ""


def _shown(entries: list[tuple[str, str]], limit: int = 2) -> str:
    text = "; ".join(lxc_line(k, v) for k, v in entries[:limit])
    return text + (f" (+{len(entries) - limit} more)" if len(entries) > limit else "")


def restart_reasons(
    spec: ContainerSpec,
    config_text: str | None,
    started_text: str | None,
    majors: dict[str, int],
    devices: Sequence[DeviceNode],
) -> list[str]:
    """Why a *running* container must restart to run its declared config ([] = none).

    - ``config_text`` is /etc/pve/lxc/VMID.conf as it is now; the lxc.* lines gpunode
      converges there are taken as written (so the answer is the same before and
      after ``container_config_lines`` writes them), and options ``pct set`` would
      park in [pve:pending] (features, unprivileged) count as waiting already.
    - ``started_text`` is /var/lib/lxc/VMID/config from the last ``pct start``. A
      declared line missing there is not live yet; a line there that gpunode owns
      (an NVIDIA mount, allow or memlock line) but no longer declares is still live.
      None (file unreadable) falls back to: would gpunode edit the config?
    """
    reasons: list[str] = []
    desired = desired_lxc_lines(spec, majors, devices) + spec.extra_lxc_entries
    if config_text is not None:
        config = pve_config.parse_pve_lxc_config(config_text)
        waiting = sorted(pve_config.pending_options(config))
        parked = [a.removeprefix("--") for a in pct_set_args(spec, pve_config.main_options(config))
                  if a in _NOT_HOTPLUGGED]
        waiting += [key for key in parked if key not in waiting]
        if waiting:
            reasons.append(f"options waiting in [pve:pending]: {', '.join(waiting)}")
    if started_text is None:
        if config_text is not None and edit_config_text(
            config_text, spec, majors, devices
        ) != config_text:
            reasons.append("its lxc.* lines change (/var/lib/lxc/VMID/config unreadable)")
        return reasons

    started = pve_config.parse_pve_lxc_config(started_text)
    live = pve_config.lxc_entries(started)
    missing = [entry for entry in desired if entry not in live]
    if missing:
        reasons.append(f"not live yet: {_shown(missing)}")
    owns = gpunode_owns(majors)
    lines = started.main.lines
    stale = [
        (line.key or "", line.value or "")
        for i, line in enumerate(lines)
        if line.is_lxc and owns(i, lines) and (line.key, line.value) not in desired
    ]
    if stale:
        reasons.append(f"still live, no longer declared: {_shown(stale)}")
    return reasons
