"""One systemctl for what pyinfra's SystemdStatus and SystemdEnabled read of the same units."""

from __future__ import annotations

from pyinfra.api import FactBase, QuoteString, StringCommand
from pyinfra.facts.systemd import SystemdEnabled, SystemdStatus


class SystemdUnits(FactBase):
    """`systemctl show` of the units' Id, SubState and UnitFileState: the output both
    SystemdStatus (SubState) and SystemdEnabled (UnitFileState) process, as each ignores the
    other's property. A bundle that reads both facts of the same units runs this once
    (gpunode.facts.bundle.issued_reads) and gives each fact its output."""

    joins = (SystemdStatus, SystemdEnabled)
    arguments = ("services",)  # reads with user_mode, machine, ... run on their own

    def requires_command(self, services: list[str]) -> str:
        return "systemctl"

    def command(self, services: list[str]) -> StringCommand:
        return StringCommand(
            "systemctl", "show", "--all", "--property", "Id", "--property", "SubState",
            "--property", "UnitFileState", *(QuoteString(unit) for unit in services),
        )

    def process(self, output: list[str]) -> list[str]:
        return list(output)
