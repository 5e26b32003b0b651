"""apt holds and installation candidates (pyinfra has no fact for them, pyinfra issue #1334):
their parsers; the read is the run's one dpkg read (gpunode.facts.dpkg.DebianPackages)."""

from __future__ import annotations


def parse_showhold(text: str) -> list[str]:
    """Package names, one a line (`apt-mark showhold`'s output)."""
    return sorted({line.strip() for line in text.splitlines() if line.strip()})


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
