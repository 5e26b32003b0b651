"""The lxc_gpu role's operations, on the Proxmox host: create a GPU container, converge its
options and raw lxc.* lines, restart it only when allowed (facts from ``gpunode.facts.lxc``):

- ``container_created(spec)``: ``pct create`` (stopped), the GPU lines appended to the fresh
  config (a new file has no [snapshot] or [pve:pending] section yet), ``pct start``;
- ``container_config_lines(spec)``: /etc/pve/lxc/VMID.conf with the GPU lines taken over
  (``lxc_gpu.takeover``: each hand-written GPU line kept, replaced, removed or left alone,
  and the reason logged), main section only, written atomically under Proxmox's own config
  lock with the old file kept under /var/backups/gpunode/pve-lxc/, and what changed recorded
  for undo (``lxc_gpu.record``, ``lxc_gpu.undo``);
- ``container_options(spec)``: ``pct set`` of the options that differ, ``pct resize`` to grow;
- ``container_restarted(spec)``: ``pct reboot`` when the running container does not run its
  declared config and ``spec.restart_allowed``, else a "pending restart" report.

Each one plans from the run's snapshot (gpunode.facts.snapshot: the role's ``needs()``,
read once) and yields only what is needed; converged, it yields nothing and says why
(``host.noop``).
"""

from __future__ import annotations

from collections.abc import Sequence
from io import StringIO
from typing import Any

from pyinfra import host, logger
from pyinfra.api import FileUploadCommand, OperationError, StringCommand, operation

from gpunode.facts import pve_config
from gpunode.facts.gpu_numa import GpuNuma
from gpunode.facts.lxc import (
    GpuNumaTopology,
    LxcStartedConfig,
    NvidiaDevices,
    PctList,
    PveLxcConfigText,
)
from gpunode.facts.nvidia_devices import DeviceNode
from gpunode.facts.proxmox import PveVersion, PveVersionFact
from gpunode.facts.sections import as_model
from gpunode.facts.snapshot import Needs, Part, node, node_changed
from gpunode.ops.changes import log_wrapped, report_change
from gpunode.ops.files import sha1_text
from gpunode.ops.shell import argv, argv_text, script, script_text
from gpunode.profile.container import (
    ContainerSpec,
    cgroup_v1_warning,
    immutable_mismatches,
    pct_create_args,
    pct_resize_args,
    pct_set_args,
)
from gpunode.pyinfra_adapter import current_state, host_prefix, is_executing, run_store
from gpunode.roles.lxc_gpu.plan import new_container_lines, restart_reasons, take_over
from gpunode.roles.lxc_gpu.record import (
    container_record,
    record_commands,
    record_needs,
    recorded_after,
)
from gpunode.roles.lxc_gpu.takeover import Decision

PVE_LXC_DIR = "/etc/pve/lxc"
BACKUP_DIR = "/var/backups/gpunode/pve-lxc"
#: Proxmox's own per-container config lock (PVE::LXC::Config->config_file_lock, an flock).
LOCK_DIR = "/run/lock/lxc"
#: Where the new config text is uploaded before it is copied beside the config under the lock.
STAGING_DIR = "/run/gpunode/pve-lxc"

def _spec(spec: ContainerSpec | dict) -> ContainerSpec:
    return spec if isinstance(spec, ContainerSpec) else ContainerSpec.model_validate(spec)


def host_devices() -> tuple[dict[str, int], list[DeviceNode]]:
    """The host's NVIDIA /proc/devices majors and /dev/nvidia* nodes (NvidiaDevices)."""
    fact = node().parts["nvidia_devices"]
    majors = {str(k): int(v) for k, v in dict(fact["majors"]).items()}
    devices = [DeviceNode(**dict(d)) for d in fact["devices"]]
    return majors, devices


def _gpu_facts() -> dict[str, Any]:
    """The host facts beyond the device nodes: Proxmox's version (devN keys need 8.2) and
    the GPUs' NUMA nodes (cpuset 'auto')."""
    parts = node().parts
    pve = as_model(PveVersion, parts["pve"])
    return {
        "pve_version": pve.manager_version if pve.present else None,
        "numa": as_model(GpuNuma, parts["gpu_numa"]),
    }


def needs(specs: Sequence[ContainerSpec]) -> Needs:
    """What the container operations read (see containers_needs)."""
    return containers_needs([int(spec.vmid) for spec in specs])


def containers_needs(vmids: Sequence[int]) -> Needs:
    """The host's NVIDIA devices, GPU NUMA nodes, Proxmox version, `pct list`, gpunode's
    records, and each container's config (as written and as started)."""
    return record_needs() | Needs(parts=(
        Part(name="nvidia_devices", fact=NvidiaDevices),
        Part(name="gpu_numa", fact=GpuNumaTopology),
        Part(name="pve", fact=PveVersionFact), Part(name="pct_list", fact=PctList),
        *(Part(name=f"config:{vmid}", fact=PveLxcConfigText, kwargs=(("vmid", vmid),))
          for vmid in vmids),
        *(Part(name=f"started:{vmid}", fact=LxcStartedConfig, kwargs=(("vmid", vmid),))
          for vmid in vmids)))


def config_text(vmid: int) -> str | None:
    """/etc/pve/lxc/VMID.conf as the snapshot read it (None: no such container)."""
    return node().parts.get(f"config:{vmid}")


def _listed(vmid: int) -> dict | None:
    """This node's `pct list` row for vmid, or None."""
    containers = node().parts.get("pct_list") or {}
    row = containers.get(vmid, containers.get(str(vmid)))
    return dict(row) if row is not None else None


def config_path(vmid: int) -> str:
    return f"{PVE_LXC_DIR}/{int(vmid)}.conf"


def append_lines_command(vmid: int, lines: Sequence[str]) -> StringCommand:
    """Append lines to a config pct create just wrote (fails if the file is missing)."""
    return script("append-lines.sh.j2", path=config_path(vmid), lines=list(lines))


@operation()
def container_created(spec: ContainerSpec):
    """
    Create the container when this node has no container with its vmid.

    + spec: the ContainerSpec (or a mapping of its fields)

    ``pct create`` leaves it stopped; the GPU passthrough and extra lxc.* lines go into the
    fresh config before ``pct start``, so its first start already has the GPUs.
    """
    spec = _spec(spec)
    row = _listed(spec.vmid)
    if row is not None:
        if row.get("name") != spec.hostname:
            raise OperationError(
                f"container {spec.vmid} exists as {row.get('name')!r}, the spec says "
                f"{spec.hostname!r}: pick a free vmid or fix the hostname"
            )
        host.noop(f"container {spec.vmid} ({spec.hostname}) exists")
        return
    majors, devices = host_devices()
    lines = new_container_lines(spec, majors, devices, **_gpu_facts())
    yield argv(*pct_create_args(spec))
    yield append_lines_command(spec.vmid, lines)
    yield from record_commands(spec.vmid, recorded_after(None, "", "\n".join(lines)))
    yield argv("pct", "start", spec.vmid)
    yield node_changed()  # a new container: its config and `pct list` row are read again


def guarded_write_commands(vmid: int, old_text: str, new_text: str) -> list[Any]:
    """Write /etc/pve/lxc/VMID.conf atomically, only if it still holds old_text.

    The new text is uploaded to a staging file named after its own hash (two runs never
    share one unless they write the same bytes), outside /etc/pve. Then, under Proxmox's
    config lock, the config is compared with what was read, the staged text is copied to a
    temporary file beside it named as Proxmox names its own (FILE.tmp.PID; on pmxcfs a
    rename is atomic), the old file is copied to BACKUP_DIR and the temporary file renamed
    over it (templates/shell/pve-config-replace.sh.j2). No chown/chmod: pmxcfs owns the
    modes (root:www-data 0640).
    """
    dest = config_path(vmid)
    staged = f"{STAGING_DIR}/{int(vmid)}.conf.{sha1_text(new_text)}"
    lock = f"{LOCK_DIR}/pve-config-{int(vmid)}.lock"
    replace = script_text(
        "pve-config-replace.sh.j2",
        dest=dest,
        staged=staged,
        backup_dir=BACKUP_DIR,
        backup_name=f"{int(vmid)}.conf",
        old_sha1=sha1_text(old_text),
    )
    return [
        StringCommand(
            f"{argv_text('mkdir', '-p', BACKUP_DIR, LOCK_DIR)} && "
            f"{argv_text('mkdir', '-p', '-m', '700', STAGING_DIR)}"
        ),
        FileUploadCommand(StringIO(new_text), staged),
        argv("flock", "-w", "60", lock, "sh", "-c", replace),
    ]


@operation()
def container_config_lines(spec: ContainerSpec):
    """
    Take over the GPU lines of /etc/pve/lxc/VMID.conf (main section only).

    + spec: the ContainerSpec (or a mapping of its fields)

    Each GPU line already there is kept, replaced, removed or left alone, and the run logs
    which and why (``lxc_gpu.takeover``); missing lines are added. Other lines, comments,
    [pve:pending] and snapshot sections are kept byte for byte; nothing is written when
    the text is already right. cgroup v1 lines (``lxc.cgroup.*``, ignored on cgroup v2
    hosts) are kept and reported with their fix.
    """
    spec = _spec(spec)
    text = config_text(spec.vmid)
    if text is None:
        host.noop(f"container {spec.vmid} does not exist yet: its lines go in when it is created")
        return
    refuse_if_locked(spec.vmid, text)
    legacy = pve_config.cgroup_v1_entries(pve_config.parse_pve_lxc_config(text))
    if legacy and not is_executing():
        log_wrapped(logger.warning, f"{host.name}: {cgroup_v1_warning(spec.vmid, legacy)}")
    majors, devices = host_devices()
    result = take_over(text, spec, majors, devices, **_gpu_facts())
    new_text = pve_config.render(result.config)
    report_decisions(config_path(spec.vmid), result.decisions, changed=new_text != text)
    if new_text == text:
        host.noop(f"{config_path(spec.vmid)}: GPU lines up to date")
        return
    yield from guarded_write_commands(spec.vmid, text, new_text)
    yield from record_commands(spec.vmid,
                               recorded_after(container_record(spec.vmid), text, new_text))


def report_decisions(path: str, decisions: Sequence[Decision], changed: bool) -> None:
    """The take-over, line by line: changes as change lines (old -> new, why); when the file
    changes, also each GPU line kept or left alone, and why, so nothing the user wrote
    disappears unnamed."""
    for d in decisions:
        if d.action == "replace":
            report_change(path, d.line, d.new, where=d.reason)
        elif d.action in ("add", "remove"):
            report_change(f"{path} {d.action}", new=d.line, where=d.reason)
        elif changed:
            _log_once(f"{path}: {d}")


def _log_once(message: str) -> None:
    """Log a line once per host and run (pyinfra evaluates an operation twice)."""
    if current_state() is not None:
        seen = run_store("_gpunode_lxc_decisions").setdefault(host.name, set())
        if message in seen:
            return
        seen.add(message)
    logger.info(f"{host_prefix(host)}{message}")


def refuse_if_locked(vmid: int, config_text: str) -> None:
    """A ``lock:`` in the main section (backup, migrate, snapshot, mounted...) means Proxmox
    is working on the container: pct refuses to change it then, and so does gpunode."""
    lock = pve_config.get(pve_config.parse_pve_lxc_config(config_text), "lock")
    if lock:
        raise OperationError(
            f"container {vmid} is locked ({lock}): run again when Proxmox has finished "
            f"(`pct unlock {vmid}` only if no {lock} is running)"
        )


def current_options(config_text: str) -> dict[str, str]:
    """Main-section options with the values already waiting in [pve:pending] on top, so an
    option parked by an earlier `pct set` is not set again while the container runs."""
    config = pve_config.parse_pve_lxc_config(config_text)
    pending = {k: v for k, v in pve_config.pending_options(config).items() if k != "delete"}
    return {**pve_config.main_options(config), **pending}


@operation()
def container_options(spec: ContainerSpec):
    """
    Converge the container's options with ``pct set`` (only those that differ), grow its disk.

    + spec: the ContainerSpec (or a mapping of its fields)

    Options Proxmox can't change after creation (unprivileged, a smaller disk) fail with
    what to do instead.
    """
    spec = _spec(spec)
    text = config_text(spec.vmid)
    if text is None:
        host.noop(f"container {spec.vmid} does not exist yet: pct create sets its options")
        return
    refuse_if_locked(spec.vmid, text)
    current = current_options(text)
    problems = immutable_mismatches(spec, current)
    if problems:
        raise OperationError("; ".join(problems))
    set_args = pct_set_args(spec, current)
    resize_args = pct_resize_args(spec, current)
    if not set_args and not resize_args:
        host.noop(f"container {spec.vmid} options up to date")
        return
    if set_args:
        yield argv(*set_args)
    if resize_args:
        yield argv(*resize_args)


@operation()
def container_restarted(spec: ContainerSpec):
    """
    Restart a running container that doesn't run its declared config, when allowed.

    + spec: the ContainerSpec; ``restart_allowed`` decides between ``pct reboot`` and a
      "pending restart" report

    Compares the declared lines with /var/lib/lxc/VMID/config (what the running container
    was started with) and looks for options parked in [pve:pending]; a stopped container
    picks everything up at its next start.
    """
    spec = _spec(spec)
    row = _listed(spec.vmid)
    if row is None:
        host.noop(f"container {spec.vmid} does not exist yet: it starts with its config")
        return
    if row.get("status") != "running":
        host.noop(f"container {spec.vmid} is {row.get('status')}: it applies its config "
                  "at its next start")
        return
    majors, devices = host_devices()
    reasons = restart_reasons(
        spec,
        config_text(spec.vmid),
        node().parts.get(f"started:{spec.vmid}"),
        majors,
        devices,
        **_gpu_facts(),
    )
    if not reasons:
        host.noop(f"container {spec.vmid} runs its declared config")
        return
    if spec.restart_allowed:
        yield argv("pct", "reboot", spec.vmid)
        return
    message = (
        f"pending restart: container {spec.vmid} ({spec.hostname}): {'; '.join(reasons)}. "
        f"Run `pct reboot {spec.vmid}` when its workload allows, or set restart_allowed: true"
    )
    if is_executing():
        log_wrapped(logger.warning, f"{host.name}: {message}")
    host.noop(message)
