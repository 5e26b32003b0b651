"""Debian packages: installed ones matching name patterns (`dpkg-query -W`), name -> version;
and the one read of dpkg's database a run makes (DebianPackages), from which the snapshot
takes its packages, holds, kernels, kernel headers and NVIDIA packages."""

from __future__ import annotations

import shlex
from fnmatch import fnmatchcase

from pydantic import BaseModel, ConfigDict
from pyinfra.api import FactBase

from gpunode.facts.apt import parse_apt_cache_policy
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


# --- the whole dpkg database, read once ---------------------------------------------------

#: Every package dpkg knows, one a line: status, selection ("hold"), name, name as apt-mark
#: names it (":arch" where dpkg says so), version, architecture.
DPKG_FORMAT = ("${db:Status-Abbrev}\\t${db:Status-Want}\\t${Package}\\t${binary:Package}\\t"
               "${Version}\\t${Architecture}\\n")
APT_POLICY_MARKER = "@@gpunode:apt-cache-policy"
# awk over dpkg-query's lines: keep those on hold or whose name matches a pattern (the
# patterns are globs of name characters and "*": anchored regexes here), and exit 1 when a
# wanted package is not installed (the shell then asks apt-cache for its candidate).
_DPKG_FILTER = r"""BEGIN {
  n = split(pats, p, " "); for (i = 1; i <= n; i++) { r = p[i]; gsub(/[.+]/, "\\\\&", r);
  gsub(/\*/, ".*", r); re[i] = "^" r "$" }
  m = split(wanted, w, " "); for (i = 1; i <= m; i++) missing[w[i]] = 1 }
BEGIN { FS = "\t" }
{ keep = ($2 == "hold"); for (i = 1; i <= n && !keep; i++) if ($3 ~ re[i]) keep = 1
  if (keep) print
  if (substr($1, 2, 1) == "i") delete missing[$3] }
END { for (k in missing) exit 1 }"""


class DpkgPackage(BaseModel):
    model_config = ConfigDict(frozen=True)

    status: str
    want: str
    name: str
    binary: str
    version: str
    arch: str

    @property
    def installed(self) -> bool:
        return is_installed_status(self.status)


class DpkgDatabase(BaseModel):
    """The packages a run asked about (and every held one), and apt's candidates when a
    wanted package was missing."""

    model_config = ConfigDict(frozen=True)

    packages: list[DpkgPackage] = []
    candidates: dict[str, str | None] = {}

    def installed(self, patterns: list[str] | tuple[str, ...]) -> dict[str, str]:
        """{name: version} of the installed packages matching the globs (dpkg-query -W's)."""
        return {p.name: p.version for p in self.packages
                if p.installed and any(fnmatchcase(p.name, pattern) for pattern in patterns)}

    def query_lines(self, patterns: list[str] | tuple[str, ...]) -> str:
        """The matching packages as `dpkg-query -f='${Package} ${Version} ${db:Status-Abbrev}'`
        lines (what the kernel parser reads)."""
        return "\n".join(f"{p.name} {p.version} {p.status}" for p in self.packages
                         if any(fnmatchcase(p.name, pattern) for pattern in patterns))

    def holds(self) -> list[str]:
        """Held packages as `apt-mark showhold` names them (the native ":arch" left off)."""
        native = next((p.arch for p in self.packages if p.name == "dpkg"), "")
        return sorted({p.binary.removesuffix(f":{native}") for p in self.packages
                       if p.want == "hold"})


def parse_dpkg_database(lines: list[str]) -> DpkgDatabase:
    """DebianPackages' output -> DpkgDatabase (odd lines skipped)."""
    packages: list[DpkgPackage] = []
    policy: list[str] | None = None
    for line in lines:
        if line == APT_POLICY_MARKER:
            policy = []
        elif policy is not None:
            policy.append(line)
        elif len(fields := line.split("\t")) == 6 and fields[2]:
            packages.append(DpkgPackage(**dict(zip(
                ("status", "want", "name", "binary", "version", "arch"),
                (field.strip() for field in fields), strict=True))))
    return DpkgDatabase(packages=packages, candidates=parse_apt_cache_policy(
        "\n".join(policy)) if policy is not None else {})


class DebianPackages(FactBase):
    """One dpkg-query of dpkg's database for the whole run (installed packages by pattern, the
    holds, the kernels and headers), filtered on the node to what was asked; `apt-cache policy`
    of the wanted packages only when one of them is not installed (it loads apt's whole cache:
    ~0.7 s on a host with 2,500 packages)."""

    @staticmethod
    def default() -> DpkgDatabase:
        return DpkgDatabase()

    def requires_command(self, *args: object, **kwargs: object) -> str:
        return "dpkg-query"

    def command(self, patterns: list[str], wanted: list[str] | None = None) -> str:
        wanted = sorted(set(wanted or ()))
        names = " ".join(shlex.quote(p) for p in wanted)
        policy = (f" || {{ echo {APT_POLICY_MARKER}; apt-cache policy {names} 2>/dev/null; }}"
                  if wanted else "")
        return (f"dpkg-query -W -f={shlex.quote(DPKG_FORMAT)} 2>/dev/null | awk "
                f"-v pats={shlex.quote(' '.join(sorted({'dpkg', *patterns})))} "
                f"-v wanted={shlex.quote(' '.join(wanted))} {shlex.quote(_DPKG_FILTER)}"
                f"{policy}")

    def process(self, output: list[str]) -> DpkgDatabase:
        return parse_dpkg_database(output)
