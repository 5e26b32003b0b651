"""Installed Debian packages matching name patterns (`dpkg-query -W`), name -> version."""

from __future__ import annotations

import shlex

from pyinfra.api import FactBase

from gpunode.facts.kernels import is_installed_status


def parse_dpkg_query(text: str) -> dict[str, str]:
    """Lines 'NAME VERSION STATUS' -> {name: version} for installed packages ('ii', 'hi')."""
    packages: dict[str, str] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 3 and is_installed_status(parts[2]):
            packages[parts[0]] = parts[1]
    return packages


def upstream_version(debian_version: str) -> str:
    """'550.127.05-1~deb12u1' -> '550.127.05' (no epoch, no Debian revision)."""
    version = debian_version.split(":", 1)[-1]
    return version.rsplit("-", 1)[0] if "-" in version else version


class InstalledPackages(FactBase):
    """Installed packages whose names match the glob patterns."""

    def command(self, patterns: list[str]) -> str:
        quoted = " ".join(shlex.quote(p) for p in patterns)
        return (
            "dpkg-query -W -f='${Package} ${Version} ${db:Status-Abbrev}\\n' "
            f"{quoted} 2>/dev/null; true"
        )

    def process(self, output: list[str]) -> dict[str, str]:
        return parse_dpkg_query("\n".join(output))
