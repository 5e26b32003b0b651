"""The host's memory, as /proc/meminfo says it (read through the snapshot's `contents`).

Pure: `parse_meminfo` turns the file's lines into sizes in KiB; the snapshot reads the file
only where a plan needs it (vm.nr_hugepages set without i_know: gpunode.roles.host_tuning).
"""

from __future__ import annotations

import re

MEMINFO = "/proc/meminfo"
_LINE = re.compile(r"^(?P<key>[A-Za-z0-9_()]+):\s+(?P<value>[0-9]+)(?:\s+kB)?\s*$", re.ASCII)


def parse_meminfo(lines: list[str] | None) -> dict[str, int]:
    """{'MemTotal': 24576000, 'Hugepagesize': 2048, ...} in KiB (counts, like HugePages_Total,
    as they are); lines that are not "Key: number [kB]" are left out."""
    values: dict[str, int] = {}
    for line in lines or []:
        match = _LINE.match(line)
        if match:
            values[match["key"]] = int(match["value"])
    return values
