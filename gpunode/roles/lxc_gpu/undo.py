"""Undo of a container's GPU lines: gpunode removes exactly the lines it added.

Each write of /etc/pve/lxc/VMID.conf (``container_created``, ``container_config_lines``)
updates the container's record, /var/lib/gpunode/lxc/VMID.json: the main-section lines gpunode
added that it has not removed since, and the user's lines it removed or replaced (the
take-over names them). Undo (``container_gpu_lines_removed``) takes one line out of the main
section for each recorded line still there (compared as key and value: Proxmox re-renders the
lines it rewrites), writes the config under Proxmox's lock with the old one kept under
/var/backups/gpunode/pve-lxc/, then removes the record. Everything else stays byte for byte:
the user's own mounts and ``devN:`` keys, comments, ``[pve:pending]`` and snapshot sections.
The user's lines gpunode removed at apply are named, not put back (one of them may be the
line that kept the container from starting). A running container keeps its GPUs until it
restarts. A container with no record (never edited, or by a gpunode that kept none) is left
as it is.
"""

from __future__ import annotations

import shlex

from pyinfra import host
from pyinfra.api import StringCommand, operation

from gpunode.facts.cache import cached_fact, changes_fact
from gpunode.facts.lxc import PctList, PveLxcConfigText
from gpunode.facts.sections import fact_data
from gpunode.ops.changes import report_change
from gpunode.roles.lxc_gpu.ops import (
    _log_once as log_once,
)
from gpunode.roles.lxc_gpu.ops import (
    config_path,
    guarded_write_commands,
    refuse_if_locked,
)
from gpunode.roles.lxc_gpu.record import (
    LxcGpuRecords,
    container_record,
    record_path,
    without_added,
)


@operation()
def container_gpu_lines_removed(vmid: int):
    """
    Take out of /etc/pve/lxc/VMID.conf exactly the lines gpunode added (its record), keep
    the old file, remove the record (see the module docstring).

    + vmid: the container
    """
    record = container_record(vmid)
    if record is None:
        host.noop(f"container {vmid}: no record of lines gpunode added")
        return
    path = config_path(vmid)
    text = cached_fact(PveLxcConfigText, vmid=vmid)
    if text is not None:
        refuse_if_locked(vmid, text)
        new_text, taken = without_added(text, record)
        for raw in taken:
            report_change(f"{path} remove", new=raw, where="gpunode added it")
        for raw in record.removed:
            log_once(f"{path}: gpunode removed this line of yours at apply, not put back: {raw}")
        if new_text != text:
            if _running(vmid):
                log_once(f"container {vmid} keeps its GPUs until it restarts (pct reboot {vmid})")
            yield from guarded_write_commands(vmid, text, new_text)
    report_change(record_path(vmid), "present", "(removed)", where="gpunode's lines undone")
    changes_fact(LxcGpuRecords)
    yield StringCommand(f"rm -f {shlex.quote(record_path(vmid))}")


def _running(vmid: int) -> bool:
    rows = fact_data(cached_fact(PctList)) or {}
    row = rows.get(vmid, rows.get(str(vmid))) or {}
    return dict(row).get("status") == "running"
