"""The node report: terminal table, Markdown and JSON, from a list of Checks (all pure).

Sections, in this order: actionable (P0, P1, P2, each with the exact fix and whether
deploy/site.py applies it), confirmed good (the live value read), known limits (the hardware's
own; nothing to chase), not present / not applicable. The verdict is READY when no P0 or P1 is
open; `exit_status()` is 1 otherwise, like LBNL NHC's ERROR/exit 1.
"""

from __future__ import annotations

import json
import re
import textwrap
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from gpunode.profile.check import Check, open_count, subject_of
from gpunode.roles.audit.engines_report import engines_markdown, engines_text

EngineRows = list[dict[str, Any]] | None

RANK_ORDER = {"P0": 0, "P1": 1, "P2": 2}
REPORT_FORMATS = {"json": ("json",), "md": ("md",), "both": ("json", "md"), "none": (),
                  "": ()}
TABLE_WIDTH = 96  # pyinfra's logger indents by 4: the report stays within 100 columns
LAST_MIN = 24
TERMINAL_WIDTHS = {"check": 44, "live": 56, "want": 28}


# --- summary -----------------------------------------------------------------------------------


def counts(checks: Iterable[Check]) -> dict[str, int]:
    out = {status: 0 for status in ("P0", "P1", "P2", "ok", "limit", "n/a")}
    for check in checks:
        out[check.status] += 1
    return out


def exit_status(checks: list[Check]) -> int:
    """0 when nothing is open, 1 when any P0 or P1 is."""
    return 1 if open_count(checks) else 0


def verdict(host: str, checks: list[Check]) -> str:
    """One line: READY / NOT READY with the counts."""
    c = counts(checks)
    tail = f"P2 {c['P2']}, ok {c['ok']}, limit {c['limit']}, n/a {c['n/a']}"
    if open_count(checks):
        return (f"{host}: NOT READY: {c['P0'] + c['P1']} open (P0 {c['P0']}, P1 {c['P1']}); "
                f"{tail}")
    return f"{host}: READY: nothing open; {tail}"


def ranked(checks: Iterable[Check]) -> list[Check]:
    """P0, then P1, then P2, each in check order."""
    actionable = [c for c in checks if c.status in RANK_ORDER]
    return sorted(actionable, key=lambda c: RANK_ORDER[c.status])


def pending(checks: Iterable[Check]) -> dict[str, list[str]]:
    """What only waits for a reboot or a container restart: {"reboot": [...], "restart": [...]}."""
    out: dict[str, list[str]] = {"reboot": [], "restart": []}
    for check in checks:
        if check.pending and check.status != "ok":
            out[check.pending].append(
                f"{check.name}: {check.live}" + (f" -> {check.want}" if check.want else "")
            )
    return out


def pending_lines(host: str, checks: list[Check]) -> list[str]:
    """'HOST: pending reboot: ...' lines for what a reboot/restart would finish."""
    lines = []
    for what, items in pending(checks).items():
        for item in items:
            lines.append(f"{host}: pending {what}: {item}")
    return lines


# --- terminal table ------------------------------------------------------------------------------


def _clip(text: str, width: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "~"


def _table(headers: list[str], rows: list[list[str]], indent: str = "  ",
           width: int = TABLE_WIDTH) -> list[str]:
    """Aligned columns, at most `width` wide: the last column wraps under itself, and when the
    others leave it less than LAST_MIN columns the widest of them gives way (its cells end in
    '~'; the JSON and Markdown reports keep every value whole)."""
    widths = [len(h) for h in headers]
    for row in rows:
        for i, cell in enumerate(row):
            widths[i] = max(widths[i], len(cell))
    lead = widths[:-1]
    while lead and len(indent) + sum(lead) + 2 * len(lead) + LAST_MIN > width and max(lead) > 12:
        lead[lead.index(max(lead))] -= 1
    start = len(indent) + sum(lead) + 2 * len(lead)
    last = max(LAST_MIN, width - start)

    def lines(cells: list[str]) -> list[str]:
        head = indent + "".join(_clip(c, w).ljust(w) + "  "
                                for c, w in zip(cells, lead, strict=False))
        wrapped = textwrap.wrap(" ".join(cells[-1].split()), last) or [""]
        return [(head + wrapped[0]).rstrip()] + [" " * start + more for more in wrapped[1:]]

    out = lines(headers)
    for row in rows:
        out += lines(row)
    return out


def fold_ok(checks: list[Check]) -> list[Check]:
    """Ok rows of the same kind (one per GPU or container) folded into one row whose live value
    lists each subject's value (or one value when they all agree)."""
    groups: dict[str, list[Check]] = {}
    for check in checks:
        if check.kind:
            groups.setdefault(check.kind, []).append(check)
    out: list[Check] = []
    done: set[str] = set()
    for check in checks:
        group = groups.get(check.kind) if check.kind else None
        if not group or len(group) < 2:
            out.append(check)
            continue
        if check.kind in done:
            continue
        done.add(check.kind)
        values = list(dict.fromkeys(c.live for c in group))
        if len(values) == 1:
            live = f"{values[0]} (all {len(group)})"
        else:
            live = "; ".join(f"{subject_of(c) or c.name}: {c.live}" for c in group)
        notes = list(dict.fromkeys(c.note for c in group if c.note))
        out.append(check.model_copy(update={
            "name": f"{check.kind} x{len(group)}", "live": live, "note": "; ".join(notes),
        }))
    return out


def render_table(host: str, checks: list[Check], engines: EngineRows = None) -> str:
    """The terminal report of one host (`engines`: the Engines section's rows)."""
    w = TERMINAL_WIDTHS
    lines = [verdict(host, checks), ""]
    actionable = ranked(checks)
    if actionable:
        lines.append("Actionable, ranked (P0 runtime fix, P1 needs a reboot/restart, P2 minor)")
        rows = []
        fixes = []
        for c in actionable:
            rows.append([c.status, _clip(c.name, w["check"]), _clip(c.live, w["live"]),
                         _clip(c.want, w["want"]), "yes" if c.deploy_fixes else "no"])
            fixes.append(c.fix)
        table = _table(["RANK", "CHECK", "LIVE", "WANT", "SITE.PY"], rows)
        lines.append(table[0])
        for row_line, fix, c in zip(table[1:], fixes, actionable, strict=True):
            lines.append(row_line)
            if fix:
                lines += textwrap.wrap(" ".join(fix.split()), TABLE_WIDTH,
                                       initial_indent="        fix: ", subsequent_indent=" " * 13)
            if c.note:
                lines += textwrap.wrap(" ".join(c.note.split()), TABLE_WIDTH,
                                       initial_indent="        why: ", subsequent_indent=" " * 13)
        lines.append("")
    lines += engines_text(engines)
    good = fold_ok([c for c in checks if c.status == "ok"])
    if good:
        lines.append("Confirmed good")
        lines += _table(["CHECK", "LIVE", "NOTE"],
                        [[_clip(c.name, w["check"]), _clip(c.live, w["live"] + 24),
                          c.note] for c in good])
        lines.append("")
    limits = fold_ok([c for c in checks if c.status == "limit"])
    if limits:
        lines.append("Known limits (the hardware's own: nothing to chase)")
        lines += _table(["CHECK", "LIVE", "WHY"],
                        [[_clip(c.name, w["check"]), _clip(c.live, w["live"]),
                          c.fix.removeprefix("none: ")] for c in limits])
        lines.append("")
    absent = [c for c in checks if c.status == "n/a"]
    if absent:
        lines.append("Not present / not applicable")
        lines += _table(["CHECK", "WHY"],
                        [[_clip(c.name, w["check"]), c.live] for c in absent])
        lines.append("")
    for line in pending_lines(host, checks):
        lines += textwrap.wrap(line, TABLE_WIDTH, subsequent_indent="    ")
    return "\n".join(lines).rstrip() + "\n"


# --- Markdown ------------------------------------------------------------------------------------


def _md(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|") or " "


def _md_table(headers: list[str], rows: list[list[str]]) -> list[str]:
    out = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    out += ["| " + " | ".join(_md(cell) for cell in row) + " |" for row in rows]
    return out


def render_markdown(host: str, checks: list[Check], engines: EngineRows = None) -> str:
    """The Markdown report of one host (every check, nothing folded)."""
    lines = [f"# gpunode audit: {host}", "", f"**{verdict(host, checks)}**", ""]
    actionable = ranked(checks)
    lines += ["## Actionable, ranked", ""]
    if actionable:
        lines += _md_table(
            ["Rank", "Check", "Live", "Want", "Fix", "deploy/site.py applies it", "Why"],
            [[c.status, c.name, c.live, c.want, c.fix, "yes" if c.deploy_fixes else "no",
              c.note] for c in actionable])
    else:
        lines.append("Nothing to do.")
    lines += engines_markdown(engines)
    lines += ["", "## Confirmed good", ""]
    lines += _md_table(["Check", "Live", "Note"],
                       [[c.name, c.live, c.note] for c in checks if c.status == "ok"])
    limits = [c for c in checks if c.status == "limit"]
    if limits:
        lines += ["", "## Known limits", "",
                  "The hardware's own limits: they look bad but nothing can change them.", ""]
        lines += _md_table(["Check", "Live", "Why"],
                           [[c.name, c.live, c.fix.removeprefix("none: ") + (
                               f" ({c.note})" if c.note else "")] for c in limits])
    absent = [c for c in checks if c.status == "n/a"]
    if absent:
        lines += ["", "## Not present / not applicable", ""]
        lines += _md_table(["Check", "Why"], [[c.name, c.live] for c in absent])
    waiting = pending(checks)
    if waiting["reboot"] or waiting["restart"]:
        lines += ["", "## Pending", ""]
        lines += [f"- {what}: {item}" for what, items in waiting.items() for item in items]
    return "\n".join(lines) + "\n"


# --- JSON ---------------------------------------------------------------------------------------


def to_json(host: str, checks: list[Check], engines: EngineRows = None) -> dict:
    """The machine-readable report: verdict, counts, pending work and every check (ranked
    first, then ok, limit, n/a; each as Check.model_dump())."""
    order = {"P0": 0, "P1": 1, "P2": 2, "ok": 3, "limit": 4, "n/a": 5}
    return {
        "host": host,
        "ready": not open_count(checks),
        "open": open_count(checks),
        "exit_status": exit_status(checks),
        "counts": counts(checks),
        "pending": pending(checks),
        "checks": [c.model_dump(mode="json") for c in sorted(checks,
                                                            key=lambda c: order[c.status])],
        **({} if engines is None else {"engines": engines}),
    }


# --- files --------------------------------------------------------------------------------------


def report_formats(value: object) -> tuple[str, ...]:
    """`--data report=json|md|both|none` -> the formats to write; ValueError otherwise."""
    key = "" if value is None else str(value).strip().lower()
    if key in ("json,md", "md,json"):
        key = "both"
    if key not in REPORT_FORMATS:
        raise ValueError(f"report={value!r}: use json, md, both or none")
    return REPORT_FORMATS[key]


def report_stem(host: str) -> str:
    """A file name for a host: '@pct/pve1:110' -> '@pct_pve1_110'."""
    return re.sub(r"[^A-Za-z0-9@._-]", "_", host) or "host"


def write_reports(host: str, checks: list[Check], formats: Iterable[str],
                  directory: str | Path = "reports", engines: EngineRows = None) -> list[Path]:
    """Write DIRECTORY/<host>.json and/or .md (local files, never on the node)."""
    written: list[Path] = []
    formats = tuple(formats)
    if not formats:
        return written
    folder = Path(directory)
    folder.mkdir(parents=True, exist_ok=True)
    stem = report_stem(host)
    if "json" in formats:
        path = folder / f"{stem}.json"
        path.write_text(json.dumps(to_json(host, checks, engines), indent=2) + "\n",
                        encoding="utf-8")
        written.append(path)
    if "md" in formats:
        path = folder / f"{stem}.md"
        path.write_text(render_markdown(host, checks, engines), encoding="utf-8")
        written.append(path)
    return written


ACTIVE_ON = frozenset({"1", "true", "yes", "on"})
ACTIVE_OFF = frozenset({"", "0", "false", "no", "off"})
ACTIVE_TIMEOUT_S = 120
ENGINE_METRICS_TIMEOUT_S = 5


def engine_metrics_timeout(flag: object, timeout: object) -> int | None:
    """`--data gpunode_audit_engine_metrics=1 [gpunode_audit_engine_metrics_timeout=S]` ->
    seconds per engine's /metrics read, None when off (the default); ValueError otherwise."""
    text = "" if flag is None else str(flag).strip().lower()
    if text in ACTIVE_OFF:
        return None
    if text not in ACTIVE_ON:
        raise ValueError(f"gpunode_audit_engine_metrics={flag!r}: use 1 (on) or 0 (off)")
    if timeout is None or str(timeout).strip() == "":
        return ENGINE_METRICS_TIMEOUT_S
    value = str(timeout).strip()
    if not re.match(r"^[0-9]{1,2}$", value) or not 1 <= int(value) <= 60:
        raise ValueError(f"gpunode_audit_engine_metrics_timeout={timeout!r}: give seconds, "
                         "1..60")
    return int(value)


def active_timeout(active: object, timeout: object) -> int | None:
    """`--data gpunode_audit_active=1 [gpunode_audit_active_timeout=S]` -> seconds per
    bandwidth test, None when the active mode is off; ValueError otherwise."""
    flag = "" if active is None else str(active).strip().lower()
    if flag in ACTIVE_OFF:
        return None
    if flag not in ACTIVE_ON:
        raise ValueError(f"gpunode_audit_active={active!r}: use 1 (on) or 0 (off)")
    if timeout is None or str(timeout).strip() == "":
        return ACTIVE_TIMEOUT_S
    text = str(timeout).strip()
    if not re.match(r"^[0-9]{2,4}$", text) or not 10 <= int(text) <= 3600:
        raise ValueError(f"gpunode_audit_active_timeout={timeout!r}: give seconds, 10..3600")
    return int(text)
