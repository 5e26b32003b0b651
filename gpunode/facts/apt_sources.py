"""apt sources (one-line `.list` and deb822 `.sources`) and the signature errors of `apt-get
update`, as apt 2 (gpgv) and apt 3 (Debian 13: sqv, Sequoia's policy) print them.

- `parse_sources_list(text, path)`: `deb [signed-by=...] URI SUITE COMPONENTS` lines;
- `parse_deb822_sources(text, path)`: `Types:`/`URIs:`/`Suites:`/`Components:`/`Signed-By:`/
  `Enabled:` stanzas, the format Debian 13 installs (/etc/apt/sources.list.d/debian.sources);
- `parse_apt_update(text)`: one `AptSignatureProblem` per repository whose signature apt
  refused or warned about. Real lines (tests/data/apt, SOURCES.md):
  "W: OpenPGP signature verification failed: URI  InRelease: Sub-process /usr/bin/sqv returned
  an error code (1), error message is: Signing key on FPR is not bound: ... because: SHA1 is
  not considered secure since 2026-02-01T00:00:00Z", "E: The repository 'URI  InRelease' is not
  signed.", apt 3's "Warning: ... Policy will reject signature within a year, see --audit for
  details", its multi-line "Audit: ..." and gpgv's "W: GPG error: URI SUITE InRelease: ...
  NO_PUBKEY 6ED0E7B82643E131" (repositories are named "URI" or "URI SUITE");
- `signature_problem_message(host, problem, sources)`: the repository, the file that defines
  it and the fix, instead of apt's raw text.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field
from pyinfra.api import FactBase

from .sections import FactModel, section_command, split_sections

__all__ = [
    "APT_SOURCES_COMMAND",
    "APT_UPDATE_LOG",
    "APT_UPDATE_RC_MARKER",
    "AptSignatureProblem",
    "AptSource",
    "AptSources",
    "AptUpdateLog",
    "AptUpdateResult",
    "parse_apt_sources_sections",
    "parse_apt_update",
    "parse_apt_update_log",
    "parse_deb822_sources",
    "parse_sources_list",
    "signature_problem_message",
    "source_for",
]


class AptSource(FactModel):
    """One repository line or stanza."""

    path: str
    types: list[str]
    uris: list[str]
    suites: list[str]
    components: list[str] = Field(default_factory=list)
    signed_by: str | None = None
    enabled: bool = True


ProblemKind = Literal["weak key", "will reject", "no public key", "expired key", "not signed"]


class AptSignatureProblem(FactModel):
    """A repository whose signature apt refused (fatal) or warned about."""

    repository: str
    """The repository URI as apt names it, without the InRelease/Release file."""
    kind: ProblemKind
    key: str | None = None
    """The signing key's fingerprint or id apt names."""
    fatal: bool
    """apt ignored the repository (error, or 'not updated' / 'failed to fetch')."""
    detail: str = ""
    """apt's reason, shortened ("SHA1 is not considered secure since 2026-02-01T00:00:00Z")."""


# --- sources ---------------------------------------------------------------------------------


_OPTIONS_RE = re.compile(r"^\[(?P<options>[^\]]*)\]\s*")


def parse_sources_list(text: str, path: str) -> list[AptSource]:
    """One-line format: `deb [arch=amd64 signed-by=/k.gpg] URI SUITE [COMPONENT...]`."""
    sources = []
    for raw in (text or "").splitlines():
        line = raw.split("#", 1)[0].strip()
        kind, _, rest = line.partition(" ")
        if kind not in ("deb", "deb-src"):
            continue
        rest = rest.strip()
        options: dict[str, str] = {}
        match = _OPTIONS_RE.match(rest)
        if match:
            for option in match.group("options").split():
                key, _, value = option.partition("=")
                options[key.strip()] = value.strip()
            rest = rest[match.end():]
        fields = rest.split()
        if len(fields) < 2:
            continue
        sources.append(AptSource(path=path, types=[kind], uris=[fields[0]], suites=[fields[1]],
                                 components=fields[2:], signed_by=options.get("signed-by")))
    return sources


def _deb822_stanzas(text: str) -> list[dict[str, str]]:
    stanzas: list[dict[str, str]] = []
    current: dict[str, str] = {}
    key = None
    for raw in (text or "").splitlines():
        if raw.startswith("#"):
            continue
        if not raw.strip():
            if current:
                stanzas.append(current)
            current, key = {}, None
            continue
        if raw[0] in " \t" and key is not None:
            current[key] += "\n" + raw.strip()  # a folded field (an inline Signed-By key)
            continue
        name, sep, value = raw.partition(":")
        if sep:
            key = name.strip().lower()
            current[key] = value.strip()
    if current:
        stanzas.append(current)
    return stanzas


def parse_deb822_sources(text: str, path: str) -> list[AptSource]:
    """deb822 stanzas (sources.list(5) "DEB822-STYLE FORMAT"); `Enabled: no` is kept as
    enabled=False."""
    sources = []
    for stanza in _deb822_stanzas(text):
        types, uris, suites = (stanza.get(k, "").split() for k in ("types", "uris", "suites"))
        if not types or not uris or not suites:
            continue
        signed_by = stanza.get("signed-by")
        sources.append(AptSource(
            path=path, types=types, uris=uris, suites=suites,
            components=stanza.get("components", "").split(),
            signed_by=signed_by if signed_by and "\n" not in signed_by else (
                "(inline key)" if signed_by else None),
            enabled=stanza.get("enabled", "yes").lower() not in ("no", "false", "0"),
        ))
    return sources


APT_SOURCES_COMMAND = (
    "for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list "
    "/etc/apt/sources.list.d/*.sources; do "
    '[ -f "$f" ] || continue; '
    "echo \"@@gpunode:$f\"; cat \"$f\"; echo; "
    "done"
)


def parse_apt_sources_sections(text: str) -> list[AptSource]:
    """Output of APT_SOURCES_COMMAND: each file's sources, `.sources` as deb822."""
    sources: list[AptSource] = []
    for path, body in split_sections(text or "").items():
        if path.endswith(".sources"):
            sources += parse_deb822_sources(body, path)
        else:
            sources += parse_sources_list(body, path)
    return sources


def source_for(repository: str, sources: list[AptSource]) -> AptSource | None:
    """The enabled source of a repository as apt names it ("URI" or "URI SUITE"): its URI
    starts the name, and its suites hold the suite when one is named."""
    uri_part, _, suite = repository.partition(" ")
    wanted = uri_part.rstrip("/")
    for source in sources:
        if not source.enabled or (suite and suite not in source.suites):
            continue
        if any(wanted.startswith(uri.rstrip("/")) for uri in source.uris):
            return source
    return None


class AptSources(FactBase):
    """Every apt source of /etc/apt/sources.list and sources.list.d (`.list` and `.sources`)."""

    @staticmethod
    def default() -> list:
        return []

    def command(self) -> str:
        return APT_SOURCES_COMMAND

    def process(self, output: list[str]) -> list[AptSource]:
        return parse_apt_sources_sections("\n".join(output))


# --- apt-get update --------------------------------------------------------------------------


_PREFIX_RE = re.compile(r"^(?P<level>W|E|Err|Warning|Error|Audit|Notice|N):\s*(?P<text>.*)$")
_URI = r"(?:https?|ftp|file|cdrom|mirror(?:\+\w+)?|tor\+https?)://[^\s']+"
# apt's names for a repository's Release file: "URI SUITE InRelease", "URI  InRelease" (a flat
# repository, two spaces) or "URI/InRelease" (a fetch URL).
_REPO_RE = re.compile(rf"(?P<uri>{_URI}?)(?:/|\s+(?:(?P<suite>[^\s/']+)\s+)?)"
                      r"(?:InRelease|Release(?:\.gpg)?)\b")
_ANY_URI_RE = re.compile(rf"(?P<uri>{_URI})")
_KEY_RES = (
    re.compile(r"Signing key on (?P<key>[0-9A-Fa-f]{16,40}) is not bound"),
    re.compile(r"NO_PUBKEY (?P<key>[0-9A-Fa-f]{8,40})"),
    re.compile(r"EXPKEYSIG (?P<key>[0-9A-Fa-f]{8,40})"),
    re.compile(r"Signature by key (?P<key>[0-9A-Fa-f]{16,40}) uses weak"),
)
_WHY_RE = re.compile(r"(?P<why>\S+ is not considered secure since \S+|Policy will reject "
                     r"signature within a year|uses weak (?:digest )?algorithm(?: \([^)]*\))?|"
                     r"public key is not available: NO_PUBKEY \S+)")
# Strength of each kind when one repository has several lines: the most telling one wins.
_RANK = {"not signed": 0, "will reject": 1, "expired key": 2, "no public key": 3, "weak key": 4}


def _kind(text: str) -> ProblemKind | None:
    if "Policy will reject signature" in text:
        return "will reject"
    if ("not considered secure" in text or "Policy rejected" in text
            or "uses weak" in text or "is not bound" in text):
        return "weak key"
    if "NO_PUBKEY" in text:
        return "no public key"
    if "EXPKEYSIG" in text or "expired" in text.lower():
        return "expired key"
    if "is not signed" in text:
        return "not signed"
    return None


def _logical_lines(text: str) -> list[tuple[str, str]]:
    """(level, text) per message; indented lines continue the one before (apt 3's Audit:)."""
    lines: list[tuple[str, str]] = []
    for raw in (text or "").splitlines():
        match = _PREFIX_RE.match(raw.strip())
        if match and not raw[:1].isspace():
            lines.append((match.group("level"), match.group("text")))
        elif raw[:1].isspace() and lines:
            level, previous = lines[-1]
            lines[-1] = (level, f"{previous} {raw.strip()}")
    return lines


def _is_fatal(level: str, text: str) -> bool:
    return (level in ("E", "Err", "Error") or "is not signed" in text
            or "The repository is not updated" in text or "Failed to fetch" in text)


def parse_apt_update(text: str) -> list[AptSignatureProblem]:
    """One problem per repository from `apt-get update 2>&1` (see the module docstring)."""
    found: dict[str, AptSignatureProblem] = {}
    for level, line in _logical_lines(text):
        kind = _kind(line)
        if kind is None:
            continue
        repo = _REPO_RE.search(line) or _ANY_URI_RE.search(line)
        if repo is None:
            continue
        suite = repo.groupdict().get("suite")
        repository = repo.group("uri").rstrip("/") + (f" {suite}" if suite else "")
        key = next((m.group("key").upper() for r in _KEY_RES if (m := r.search(line))), None)
        why = _WHY_RE.search(line)
        detail = why.group("why") if why else ""
        fatal = _is_fatal(level, line)
        old = found.get(repository)
        if old is not None:
            if _RANK[old.kind] > _RANK[kind]:
                kind = old.kind
            key, detail = key or old.key, detail or old.detail
            fatal = fatal or old.fatal
        found[repository] = AptSignatureProblem(repository=repository, kind=kind, key=key,
                                                fatal=fatal, detail=detail)
    return list(found.values())


APT_UPDATE_LOG = "/run/gpunode/apt-update.log"
APT_UPDATE_RC_MARKER = "gpunode-apt-update-rc="


class AptUpdateResult(FactModel):
    rc: int | None = None
    """apt-get update's exit status (None: no log)."""
    problems: list[AptSignatureProblem] = Field(default_factory=list)
    tail: list[str] = Field(default_factory=list)
    """apt's last lines, for a failure no problem explains."""


def parse_apt_update_log(text: str) -> AptUpdateResult:
    """The log `apt_update` writes: apt-get update's output, then the rc marker line."""
    rc = None
    lines = []
    for line in (text or "").splitlines():
        if line.startswith(APT_UPDATE_RC_MARKER) and line[len(APT_UPDATE_RC_MARKER):].isdigit():
            rc = int(line[len(APT_UPDATE_RC_MARKER):])
        else:
            lines.append(line)
    body = "\n".join(lines)
    tail = [line for line in lines if line.startswith(("E:", "Error:", "W:", "Warning:"))][-5:]
    return AptUpdateResult(rc=rc, problems=parse_apt_update(body), tail=tail)


class AptUpdateLog(FactBase):
    """The last `apt_update` log (gpunode.ops.apt), parsed."""

    @staticmethod
    def default() -> AptUpdateResult:
        return AptUpdateResult()

    def command(self) -> str:
        return section_command("log", f"cat {APT_UPDATE_LOG}")

    def process(self, output: list[str]) -> AptUpdateResult:
        return parse_apt_update_log(split_sections("\n".join(output)).get("log", ""))


# --- messages --------------------------------------------------------------------------------


CUDA_REPOSITORY = "developer.download.nvidia.com/compute/cuda/repos/"
_CUDA_FIX = (
    "NVIDIA signs only its debian13 CUDA repository with a key apt 3 accepts: on Debian 13 use "
    "https://developer.download.nvidia.com/compute/cuda/repos/debian13/x86_64/ with the "
    "cuda-keyring package from that directory (it installs the new key and the source), and "
    "remove the old source"
)
_WHAT: dict[str, str] = {
    "weak key": "its key's binding signature is too weak",
    "will reject": "its key will be rejected",
    "no public key": "no public key for it",
    "expired key": "its key expired",
    "not signed": "the repository is not signed",
}
_FIXES: dict[str, str] = {
    "weak key": "the key is bound with SHA1, which apt 3's Sequoia policy (sqv) rejects since "
    "2026-02-01: install the vendor's re-signed key; only as a stop-gap, and knowing it "
    "weakens every repository's check, extend the SHA1 deadline in "
    "/etc/crypto-policies/back-ends/apt-sequoia.config",
    "will reject": "apt 3 will reject this key (SHA1 binding) after its policy deadline: get the "
    "vendor's re-signed key now (`apt-get --audit update` shows why)",
    "no public key": "apt has no key for it: install the vendor's keyring under "
    "/usr/share/keyrings and name it in the source (Signed-By: in a .sources file, "
    "[signed-by=...] in a .list line)",
    "expired key": "the signing key expired: install the vendor's current keyring",
    "not signed": "apt could not verify the repository's signature: check its key "
    "(`apt-get --audit update` shows why)",
}


def signature_problem_message(host: str, problem: AptSignatureProblem,
                              sources: list[AptSource] | None = None) -> str:
    """'HOST: apt rejects (or warns about) the signature of REPO (defined in FILE, key K):
    why. Fix: ...'."""
    verb = "rejects" if problem.fatal else "warns about"
    where = []
    source = source_for(problem.repository, sources or [])
    if source is not None:
        where.append(f"defined in {source.path}")
    if problem.key:
        where.append(f"key {problem.key}")
    place = f" ({', '.join(where)})" if where else ""
    why = f": {problem.detail or _WHAT[problem.kind]}"
    fix = _FIXES[problem.kind]
    if CUDA_REPOSITORY in problem.repository and problem.kind in ("weak key", "will reject"):
        fix = _CUDA_FIX
    return (f"{host}: apt {verb} the signature of {problem.repository}{place}{why}. "
            f"Fix: {fix}")
