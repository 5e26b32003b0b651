"""The record of what gpunode changed in a container's config, for undo (``lxc_gpu.undo``).

/var/lib/gpunode/lxc/VMID.json, updated with each write of /etc/pve/lxc/VMID.conf: the
main-section lines gpunode added that it has not removed since, and the user's lines it
removed or replaced.
"""

from __future__ import annotations

import base64
import binascii
import json
import shlex
from collections import Counter
from io import StringIO
from typing import Any

from pyinfra.api import FactBase, FileUploadCommand, StringCommand

from gpunode.facts import pve_config
from gpunode.facts.owned import STATE_DIR
from gpunode.facts.sections import FactModel
from gpunode.facts.snapshot import Needs, Part, node
from gpunode.ops.files import durable_rename, temp_path

RECORD_DIR = f"{STATE_DIR}/lxc"


class LxcLinesRecord(FactModel):
    """What gpunode changed in one container's config: the lines it added (still its own)
    and the user's lines it removed or replaced."""

    added: list[str] = []
    removed: list[str] = []


def record_path(vmid: int) -> str:
    return f"{RECORD_DIR}/{int(vmid)}.json"


def _key_lines(text: str) -> list[str]:
    """The main section's key lines (raw), in file order."""
    config = pve_config.parse_pve_lxc_config(text)
    return [ln.raw for ln in config.main.lines if ln.kind == "key"]


def recorded_after(record: LxcLinesRecord | None, old_text: str, new_text: str
                   ) -> LxcLinesRecord:
    """The record once old_text is rewritten as new_text (pure): lines new in the main section
    join `added`; a removed line leaves `added` when it was gpunode's, else joins `removed`."""
    record = record or LxcLinesRecord()
    old, new = Counter(_key_lines(old_text)), Counter(_key_lines(new_text))
    gone, came = old - new, new - old
    own_gone = gone & Counter(record.added)
    added = Counter(record.added) - own_gone + came
    kept_order = [raw for raw in _key_lines(new_text) if raw in added]
    return LxcLinesRecord(
        added=[raw for raw in dict.fromkeys(kept_order) for _ in range(added[raw])],
        removed=[*record.removed, *(gone - own_gone).elements()],
    )


def _identity(raw: str) -> tuple[str | None, str | None]:
    line = pve_config.parse_pve_lxc_config(raw).main.lines[0]
    return line.key, line.value


def without_added(text: str, record: LxcLinesRecord) -> tuple[str, list[str]]:
    """text without one main-section line per recorded added line (by key and value), and
    the lines taken out (pure). The rest of the file stays byte for byte."""
    config = pve_config.parse_pve_lxc_config(text)
    todo = Counter(_identity(raw) for raw in record.added)
    kept, taken = [], []
    for line in config.main.lines:
        if line.kind == "key" and todo[(line.key, line.value)] > 0:
            todo[(line.key, line.value)] -= 1
            taken.append(line.raw)
        else:
            kept.append(line)
    if not taken:
        return text, []
    return pve_config.render(pve_config._with_main(config, kept)), taken


class LxcGpuRecords(FactBase):
    """Every container record under /var/lib/gpunode/lxc: {vmid: LxcLinesRecord}."""

    def command(self) -> str:
        d = shlex.quote(RECORD_DIR)
        return (f"for f in {d}/*.json; do [ -f \"$f\" ] || continue; "
                f"printf '%s\\t' \"${{f##*/}}\"; base64 -w0 \"$f\"; echo; done; true")

    def process(self, output: list[str]) -> dict[int, Any]:
        records: dict[int, Any] = {}
        for line in output:
            name, _, payload = line.partition("\t")
            stem = name.removesuffix(".json")
            try:
                data = json.loads(base64.b64decode(payload, validate=True))
                records[int(stem)] = LxcLinesRecord.model_validate(data).to_json()
            except (ValueError, binascii.Error):
                continue
        return records


def container_record(vmid: int) -> LxcLinesRecord | None:
    records = node().parts.get("lxc_records") or {}
    raw = records.get(vmid, records.get(str(vmid)))
    return LxcLinesRecord.model_validate(raw) if raw is not None else None


def record_commands(vmid: int, record: LxcLinesRecord) -> list[Any]:
    """Write the record atomically (temporary file + rename)."""
    path = record_path(vmid)
    temp = temp_path(path)
    return [
        StringCommand(f"mkdir -p {shlex.quote(RECORD_DIR)}"),
        FileUploadCommand(StringIO(json.dumps(record.to_json(), indent=2) + "\n"), temp),
        StringCommand(durable_rename(shlex.quote(temp), shlex.quote(path))),
    ]




def recorded_vmids() -> list[int]:
    """The containers with a record on this host."""
    return sorted(int(v) for v in (node().parts.get("lxc_records") or {}))


def record_needs() -> Needs:
    """What reading the records takes."""
    return Needs(parts=(Part(name="lxc_records", fact=LxcGpuRecords),))
