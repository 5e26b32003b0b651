"""The boot id: a random UUID the Linux kernel draws at every boot (proc(5),
/proc/sys/kernel/random/boot_id), so a changed id proves the host rebooted."""

from __future__ import annotations

from pyinfra.api import FactBase

BOOT_ID_FILE = "/proc/sys/kernel/random/boot_id"


def parse_boot_id(lines: list[str]) -> str:
    """The id from the file's one line ("" when it could not be read)."""
    return lines[0].strip() if lines else ""


class BootId(FactBase[str]):
    """The kernel's boot id ("" when unreadable)."""

    def command(self) -> str:
        return f"cat {BOOT_ID_FILE}"

    def process(self, output: list[str]) -> str:
        return parse_boot_id(list(output))

    @staticmethod
    def default() -> str:
        return ""
