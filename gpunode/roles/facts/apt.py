"""apt holds (`apt-mark showhold`): pyinfra has no fact for them (pyinfra issue #1334)."""

from __future__ import annotations

import shlex

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


def parse_apt_cache_policy(text: str) -> dict[str, str | None]:
    """`apt-cache policy PKG...` -> {package: candidate version, None for '(none)'}. A name
    apt does not know is not in the output at all (apt says so on stderr only)."""
    candidates: dict[str, str | None] = {}
    package = None
    for line in text.splitlines():
        if line and not line[0].isspace() and line.rstrip().endswith(":"):
            package = line.rstrip()[:-1]
        elif package and line.strip().startswith("Candidate:"):
            value = line.split(":", 1)[1].strip()
            candidates[package] = None if value == "(none)" else value
    return candidates


class AptCandidates(FactBase):
    """The version apt would install of each package (None: no installation candidate)."""

    def requires_command(self, *args: object, **kwargs: object) -> str:
        return "apt-cache"

    def command(self, packages: list[str]) -> str:
        return "apt-cache policy " + " ".join(shlex.quote(p) for p in packages) + " 2>/dev/null"

    def process(self, output: list[str]) -> dict[str, str | None]:
        return parse_apt_cache_policy("\n".join(output))

    @staticmethod
    def answers(cached: dict, wanted: dict) -> bool:
        """A read of more packages answers a read of some of them."""
        return set(wanted.get("packages", [])) <= set(cached.get("packages", []))
