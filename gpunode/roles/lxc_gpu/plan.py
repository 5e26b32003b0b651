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
from typing import Any

from gpunode.facts import pve_config
from gpunode.facts.gpu_numa import GpuNuma, local_cpuset
from gpunode.facts.nvidia_devices import DeviceNode, gpu_indices_on_host
from gpunode.profile.container import (
    ContainerSpec,
    cgroup_v1_warning,
    immutable_mismatches,
    pct_create_args,
    pct_resize_args,
    pct_set_args,
)
from gpunode.roles.lxc_gpu.passthrough import gpu_passthrough_lines
from gpunode.roles.lxc_gpu.takeover import (
    ALLOW_KEY,
    CPUS_KEY,
    MEMLOCK_KEY,
    MEMS_KEY,
    MOUNT_KEY,
    Decision,
    GpuLines,
    Takeover,
    converge_gpu_lines,
    dev_path,
    gpu_lines_for,
    in_scope_target,
    mount_target,
    nvidia_allow,
    passthrough_style,
    stale_allow,
)

__all__ = [
    "ContainerPlan",
    "desired_lxc_lines",
    "edit_config_text",
    "gpu_lines",
    "take_over",
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
    decisions: list[Decision] = field(default_factory=list)

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
    """The mount-style GPU block for this container (what a new container gets with
    ``gpu_passthrough: mount``; ``take_over`` decides for an existing config)."""
    return gpu_passthrough_lines(devices, majors, spec.gpu_indices, memlock=spec.memlock)


def cpuset_values(spec: ContainerSpec, numa: GpuNuma | None, devices: Sequence[DeviceNode]
                  ) -> list[tuple[str, str]]:
    """The cpuset keys to set: declared lists as they are; 'auto' from the GPUs' NUMA node(s)
    (nothing when there is nothing to pin, see ``numa.local_cpuset``)."""
    gpus = spec.gpu_indices if spec.gpu_indices is not None else gpu_indices_on_host(devices)
    local = local_cpuset(numa, gpus)
    values = []
    for key, declared, index in ((CPUS_KEY, spec.cpuset_cpus, 0), (MEMS_KEY, spec.cpuset_mems, 1)):
        if declared == "auto":
            if local is not None:
                values.append((key, local[index]))
        elif declared is not None:
            values.append((key, declared))
    return values


def gpu_lines(
    spec: ContainerSpec,
    majors: dict[str, int],
    devices: Sequence[DeviceNode],
    *,
    pve_version: str | None = None,
    numa: GpuNuma | None = None,
) -> GpuLines:
    """What the container should get, from the spec and the host's facts."""
    style, explicit = passthrough_style(spec.gpu_passthrough, pve_version)
    singles = [(MEMLOCK_KEY, str(spec.memlock)), *cpuset_values(spec, numa, devices)]
    return gpu_lines_for(devices, majors, spec.gpu_indices, style, explicit, singles)


def take_over(
    text: str,
    spec: ContainerSpec,
    majors: dict[str, int],
    devices: Sequence[DeviceNode],
    *,
    pve_version: str | None = None,
    numa: GpuNuma | None = None,
) -> Takeover:
    """The converged config with one decision per GPU line (keep, add, replace, remove,
    leave), then the extra lxc.* lines added when missing."""
    want = gpu_lines(spec, majors, devices, pve_version=pve_version, numa=numa)
    result = converge_gpu_lines(pve_config.parse_pve_lxc_config(text), want)
    config = result.config
    for key, value in spec.extra_lxc_entries:
        config = pve_config.with_lxc_entry(config, key, value)
    return Takeover(config, result.decisions)


def edit_config_text(
    text: str,
    spec: ContainerSpec,
    majors: dict[str, int],
    devices: Sequence[DeviceNode],
    *,
    pve_version: str | None = None,
    numa: GpuNuma | None = None,
) -> str:
    """The container config with gpunode's lines converged; equal to ``text`` when
    nothing needs to change."""
    result = take_over(text, spec, majors, devices, pve_version=pve_version, numa=numa)
    return pve_config.render(result.config)


def new_container_lines(
    spec: ContainerSpec,
    majors: dict[str, int],
    devices: Sequence[DeviceNode],
    *,
    pve_version: str | None = None,
    numa: GpuNuma | None = None,
) -> list[str]:
    """The lines appended to the config ``pct create`` just wrote: devN keys first, then
    the lxc.* lines (an empty config converged the same way as an existing one)."""
    text = edit_config_text("", spec, majors, devices, pve_version=pve_version, numa=numa)
    return text.splitlines()


def plan_container(
    spec: ContainerSpec,
    config_text: str | None,
    running: bool,
    majors: dict[str, int],
    devices: Sequence[DeviceNode],
    *,
    pve_version: str | None = None,
    numa: GpuNuma | None = None,
) -> ContainerPlan:
    """Plan one container. ``config_text`` is /etc/pve/lxc/VMID.conf (None: absent)."""
    plan = ContainerPlan(vmid=spec.vmid)
    facts: dict[str, Any] = {"pve_version": pve_version, "numa": numa}

    if config_text is None:
        plan.create = pct_create_args(spec)
        plan.append_lines = new_container_lines(spec, majors, devices, **facts)
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

    result = take_over(config_text, spec, majors, devices, **facts)
    plan.decisions = result.decisions
    new_text = pve_config.render(result.config)
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


def _waiting_options(spec: ContainerSpec, config_text: str) -> list[str]:
    """Options in [pve:pending], or that `pct set` would park there (not hotplugged)."""
    config = pve_config.parse_pve_lxc_config(config_text)
    waiting = sorted(pve_config.pending_options(config))
    parked = [a.removeprefix("--") for a in pct_set_args(spec, pve_config.main_options(config))
              if a in _NOT_HOTPLUGGED]
    waiting += [key for key in parked if key not in waiting]
    return [f"options waiting in [pve:pending]: {', '.join(waiting)}"] if waiting else []


def _still_live(started: pve_config.PveLxcConfig, want: Any, registered: set[int],
                desired: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """GPU lines the running container was started with that the config no longer has."""
    lines = started.main.lines
    return [
        (line.key or "", line.value or "")
        for i, line in enumerate(lines)
        if line.is_lxc
        and (_is_gpu_entry((line.key or "", line.value or ""), want)
             or stale_allow(lines, i, want, registered))
        and (line.key, line.value) not in desired
    ]


def restart_reasons(
    spec: ContainerSpec,
    config_text: str | None,
    started_text: str | None,
    majors: dict[str, int],
    devices: Sequence[DeviceNode],
    *,
    pve_version: str | None = None,
    numa: GpuNuma | None = None,
) -> list[str]:
    """Why a *running* container must restart to run its declared config ([] = none).

    - ``config_text`` is /etc/pve/lxc/VMID.conf as it is now; the GPU lines are those
      gpunode converges it to (so the answer is the same before and after
      ``container_config_lines`` writes them), and options ``pct set`` would park in
      [pve:pending] (features, unprivileged) count as waiting already.
    - ``started_text`` is /var/lib/lxc/VMID/config from the last ``pct start``. A GPU line
      missing there is not live yet (a devN key is live as the ``c MAJOR:MINOR rw`` allow
      Proxmox generates for it); a GPU line there that the converged config no longer has
      (an NVIDIA mount, allow, memlock or cpuset line) is still live.
      None (file unreadable) falls back to: would gpunode edit the config?
    """
    facts: dict[str, Any] = {"pve_version": pve_version, "numa": numa}
    reasons: list[str] = []
    text = config_text if config_text is not None else ""
    result = take_over(text, spec, majors, devices, **facts)
    if config_text is not None:
        reasons += _waiting_options(spec, config_text)
    if started_text is None:
        if config_text is not None and pve_config.render(result.config) != config_text:
            reasons.append("its lxc.* lines change (/var/lib/lxc/VMID/config unreadable)")
        return reasons

    desired = _declared_live_lines(result, devices) + spec.extra_lxc_entries
    started = pve_config.parse_pve_lxc_config(started_text)
    live = pve_config.lxc_entries(started)
    missing = [entry for entry in desired if entry not in live]
    if missing:
        reasons.append(f"not live yet: {_shown(missing)}")
    want = gpu_lines(spec, majors, devices, **facts)
    stale = _still_live(started, want, set(majors.values()) | {d.major for d in devices},
                        desired)
    if stale:
        reasons.append(f"still live, no longer declared: {_shown(stale)}")
    return reasons


def _declared_live_lines(result: Takeover, devices: Sequence[DeviceNode]
                         ) -> list[tuple[str, str]]:
    """The lxc entries a container started from the converged config runs with."""
    by_path = {d.path: d for d in devices}
    entries: list[tuple[str, str]] = []
    for decision in result.decisions:
        if decision.action not in ("keep", "add", "replace"):
            continue
        raw = decision.new if decision.action == "replace" else decision.line
        line = pve_config.parse_pve_lxc_config((raw or "") + "\n").main.lines[0]
        if line.is_lxc:
            entries.append((line.key or "", line.value or ""))
        elif line.kind == "key" and (line.key or "").startswith("dev"):
            node = by_path.get(dev_path(line.value or ""))
            if node is not None:
                entries.append((ALLOW_KEY, f"c {node.major}:{node.minor} rw"))
    return entries


def _is_gpu_entry(entry: tuple[str, str], want: GpuLines) -> bool:
    """An lxc entry gpunode converges: NVIDIA mounts and allows, memlock, cpuset."""
    key, value = entry
    if key in (MEMLOCK_KEY, CPUS_KEY, MEMS_KEY):
        # Proxmox writes its own cpuset.cpus for `cores` when the config sets none.
        return key in dict(want.singles)
    if key == MOUNT_KEY:
        target = mount_target(value)
        return target is not None and in_scope_target(target)
    if key == ALLOW_KEY:
        return nvidia_allow(value, want)
    return False
