"""apt holds and installation candidates: pyinfra has no fact for them (pyinfra issue #1334)."""

from __future__ import annotations

import shlex

from pyinfra.api import FactBase

#: The packages on hold, one a line, named as `apt-mark showhold` names them (the native
#: architecture's ":amd64" left off), read from dpkg's selections, where `apt-mark hold` puts a
#: hold: dpkg-query reads only dpkg's status file (~10 ms on a host with 2,500 packages) where
#: apt-mark builds apt's whole cache first (~0.7 s there, more on a slow node).
HOLDS_COMMAND = (
    "dpkg-query -W -f='${db:Status-Want} ${binary:Package}\\n' 2>/dev/null | "
    "awk -v arch=\":$(dpkg --print-architecture)\" "
    "'$1 == \"hold\" { sub(arch \"$\", \"\", $2); print $2 }'"
)


def parse_showhold(text: str) -> list[str]:
    """Package names, one a line (HOLDS_COMMAND's or `apt-mark showhold`'s output)."""
    return sorted({line.strip() for line in text.splitlines() if line.strip()})


class AptHolds(FactBase):
    """Packages on hold."""

    def requires_command(self, *args: object, **kwargs: object) -> str:
        return "dpkg-query"

    def command(self) -> str:
        return HOLDS_COMMAND

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
    """The version apt would install of each package (None: no installation candidate), asked
    only when one of them is not installed ({} when all are): apt-cache loads apt's whole cache
    (~0.7 s on a host with 2,500 packages), one dpkg-query and one grep decide first."""

    def requires_command(self, *args: object, **kwargs: object) -> str:
        return "apt-cache"

    def command(self, packages: list[str]) -> str:
        names = " ".join(shlex.quote(p) for p in packages)
        return (
            f"[ \"$(dpkg-query -W -f='${{db:Status-Status}}\\n' {names} 2>/dev/null "
            f"| grep -cx installed)\" = {len(set(packages))} ] "
            f"|| apt-cache policy {names} 2>/dev/null"
        )

    def process(self, output: list[str]) -> dict[str, str | None]:
        return parse_apt_cache_policy("\n".join(output))

