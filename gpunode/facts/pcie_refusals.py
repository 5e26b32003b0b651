"""MaxReadReq writes a device refused during this boot (recorded under /run/gpunode)."""

from __future__ import annotations

from pyinfra.api import FactBase

REFUSED_DIR = "/run/gpunode/mrrs-refused"


def parse_refusals(text: str) -> dict[str, int]:
    """Lines 'BDF SIZE' -> {bdf: size the device refused}."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].isdigit():
            out[parts[0]] = int(parts[1])
    return out


class MaxReadReqRefusals(FactBase):
    """Devices that kept their MaxReadReq after a masked write in this boot."""

    def command(self) -> str:
        # shell builtins only (read, ${f##*/}): no process per device
        return (
            f'for f in {REFUSED_DIR}/*; do [ -f "$f" ] || continue; v=; read -r v < "$f"; '
            'echo "${f##*/} $v"; done; true'
        )

    def process(self, output: list[str]) -> dict[str, int]:
        return parse_refusals("\n".join(output))
