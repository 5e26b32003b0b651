"""systemd units in one `systemctl show`: whether each is active and enabled."""

from __future__ import annotations

from pyinfra.api import FactBase, QuoteString, StringCommand
from pyinfra.facts.systemd import SystemdEnabled, SystemdStatus

from gpunode.facts.sections import FactModel


class Unit(FactModel):
    """A unit's state as pyinfra's SystemdStatus (active) and SystemdEnabled (enabled) read it."""

    active: bool = False
    enabled: bool = False


def parse_units(lines: list[str]) -> dict[str, Unit]:
    """`systemctl show` of Id, SubState and UnitFileState -> unit -> Unit, through pyinfra's
    own parsers (each reads its property and ignores the other)."""
    active = SystemdStatus().process(list(lines))
    enabled = SystemdEnabled().process(list(lines))
    return {name: Unit(active=bool(active.get(name)), enabled=bool(enabled.get(name)))
            for name in sorted({*active, *enabled})}


class SystemdUnits(FactBase):
    """`systemctl show` of the units' Id, SubState, UnitFileState and ActiveState (raw lines:
    parse_units; the audit reads nvidia-persistenced's ActiveState from them)."""

    def requires_command(self, services: list[str]) -> str:
        return "systemctl"

    def command(self, services: list[str]) -> StringCommand:
        return StringCommand(
            "systemctl", "show", "--all", "--property", "Id", "--property", "SubState",
            "--property", "UnitFileState", "--property", "ActiveState",
            *(QuoteString(unit) for unit in services),
        )

    def process(self, output: list[str]) -> list[str]:
        return list(output)
