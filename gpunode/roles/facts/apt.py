"""apt holds (`apt-mark showhold`): pyinfra has no fact for them (pyinfra issue #1334)."""

from __future__ import annotations

from pyinfra.api import FactBase


def parse_showhold(text: str) -> list[str]:
    """Package names, one a line, from `apt-mark showhold`."""
    return sorted({line.strip() for line in text.splitlines() if line.strip()})


class AptHolds(FactBase):
    """Packages on hold."""

    def requires_command(self, *args: object, **kwargs: object) -> str:
        return "apt-mark"

    def command(self) -> str:
        return "apt-mark showhold"

    def process(self, output: list[str]) -> list[str]:
        return parse_showhold("\n".join(output))
