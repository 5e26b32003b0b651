"""The report's unit: one Check per setting or hardware fact, with its rank and its fix.

Shared below the roles: the audit reports Checks, the deploys' verify steps (the host's
verify_node, the container role's verify_container) print them.

Ranks (tuned-adm verify + LBNL NHC + DCGM levels, folded into one scale):

| status | meaning                                             | exit |
|--------|-----------------------------------------------------|------|
| ok     | confirmed good; `live` holds the value read         | 0    |
| P0     | wrong now, fixable at runtime (no reboot)           | 1    |
| P1     | needs a reboot (or a container restart) to fix      | 1    |
| P2     | minor or needs a look; does not fail the audit      | 0    |
| limit  | the hardware's own limit: looks bad, nobody chases  | 0    |
| n/a    | not applicable / not present on this node           | 0    |

`deploy_fixes` says whether `deploy/site.py` (with this profile) would apply the fix.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

from pydantic import BaseModel, ConfigDict

Status = Literal["ok", "P0", "P1", "P2", "limit", "n/a"]
STATUSES: tuple[str, ...] = ("P0", "P1", "P2", "ok", "limit", "n/a")
OPEN_STATUSES = frozenset({"P0", "P1"})
DEPLOY_FIX = "run deploy/site.py"


class Check(BaseModel):
    """One line of the report."""

    model_config = ConfigDict(frozen=True)

    name: str
    status: Status
    live: str
    want: str = ""
    fix: str = ""
    deploy_fixes: bool = False
    kind: str = ""
    """What is checked, without the subject ("GPU temperature" for "GPU0 temperature"): rows
    of the same kind that are all ok fold into one line of the terminal table."""
    note: str = ""
    """Context that keeps a reader from chasing a value (idle link speed, DevCap limit)."""
    pending: Literal["", "reboot", "restart"] = ""
    """Everything is in place but a reboot (or a container restart) makes it live."""

    @property
    def open(self) -> bool:
        return self.status in OPEN_STATUSES


def ok(name: str, live: str, want: str = "", *, kind: str = "", note: str = "") -> Check:
    return Check(name=name, status="ok", live=live, want=want, kind=kind, note=note)


def not_applicable(name: str, why: str, *, kind: str = "") -> Check:
    return Check(name=name, status="n/a", live=why, kind=kind)


def open_count(checks: list[Check]) -> int:
    return sum(c.open for c in checks)


def pending(checks: Iterable[Check]) -> dict[str, list[str]]:
    """What only waits for a reboot or a container restart: {"reboot": [...], "restart": [...]}."""
    out: dict[str, list[str]] = {"reboot": [], "restart": []}
    for check in checks:
        if check.pending and check.status != "ok":
            out[check.pending].append(
                f"{check.name}: {check.live}" + (f" -> {check.want}" if check.want else "")
            )
    return out


def subject_of(check: Check) -> str:
    """The name without the words it shares with the kind at its end:
    ("GPU0 temperature", kind "GPU temperature") -> "GPU0"."""
    if not check.kind:
        return ""
    words = check.kind.split()
    for start in range(len(words)):
        suffix = " " + " ".join(words[start:])
        if check.name.endswith(suffix):
            return check.name[: -len(suffix)]
    return ""


def summary_lines(host_name: str, checks: list[Check]) -> list[str]:
    """One line per check that is open or minor (P0/P1/P2), then a count."""
    lines = [
        f"{host_name}: {c.status:5} {c.name}: {c.live}" + (f" -> {c.want}" if c.want else "")
        + (f" [{c.fix}]" if c.fix else "")
        for c in checks
        if c.status in ("P0", "P1", "P2")
    ]
    passed = sum(c.status == "ok" for c in checks)
    open_ = sum(c.open for c in checks)
    lines.append(f"{host_name}: verified {passed}/{len(checks)} ok, {open_} open (P0/P1)")
    return lines
