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
import time
from collections.abc import Iterable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from gpunode import __version__
from gpunode.profile.check import Check, open_count, pending, subject_of
from gpunode.roles.audit.engines_report import engines_markdown, engines_text
from gpunode.roles.audit.metrics import write_atomic

EngineRows = list[dict[str, Any]] | None

RANK_ORDER = {"P0": 0, "P1": 1, "P2": 2}
REPORT_FORMATS = {"json": ("json",), "md": ("md",), "both": ("json", "md"), "none": (),
                  "": ()}
TABLE_WIDTH = 96  # pyinfra's logger indents by 4: the report stays within 100 columns
MIN_COLUMN = 12
REPORT_SCHEMA_VERSION = 1


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


def pending_lines(host: str, checks: list[Check]) -> list[str]:
    """'HOST: pending reboot: ...' lines for what a reboot/restart would finish."""
    lines = []
    for what, items in pending(checks).items():
        for item in items:
            lines.append(f"{host}: pending {what}: {item}")
    return lines


# --- terminal table ------------------------------------------------------------------------------


def _widths(headers: list[str], rows: list[list[str]], keep: int, room: int) -> list[int]:
    """Each column as wide as its widest cell; while the table is wider than room, the widest
    column other than column `keep` (CHECK: names are never cut) gives a column, down to its
    header or MIN_COLUMN, whichever is wider; its cells then wrap under themselves."""
    widths = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(headers)]
    floors = [max(len(h), MIN_COLUMN) for h in headers]
    floors[keep] = widths[keep]
    for stage in (0, 1):  # then column `keep` too, when the others are at their floors
        if stage:
            floors[keep] = max(len(headers[keep]), MIN_COLUMN)
        while sum(widths) + 2 * (len(widths) - 1) > room:
            give = [i for i, w in enumerate(widths) if w > floors[i]]
            if not give:
                break
            widths[max(give, key=lambda i: widths[i])] -= 1
    return widths


def _table(headers: list[str], rows: list[list[str]], indent: str = "  ",
           width: int = TABLE_WIDTH, keep: int = 0) -> list[str]:
    """Aligned columns sized by their content, at most `width` wide (pyinfra indents by 4):
    a cell longer than its column wraps under itself (the JSON and Markdown reports keep
    every value on one line); column `keep` keeps its whole width."""
    rows = [[" ".join(cell.split()) for cell in row] for row in rows]
    widths = _widths(headers, rows, keep, width - len(indent))

    def lines(cells: list[str]) -> list[str]:
        wrapped = [textwrap.wrap(c, w, break_on_hyphens=False) or [""]
                   for c, w in zip(cells, widths, strict=True)]
        out = []
        for k in range(max(len(w) for w in wrapped)):
            parts = [(col[k] if k < len(col) else "").ljust(w)
                     for col, w in zip(wrapped, widths, strict=True)]
            out.append((indent + "  ".join(parts)).rstrip())
        return out

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


def _actionable_lines(actionable: list[Check]) -> list[str]:
    """The ranked table, each row followed by its fix and why."""
    rows = [[c.status, c.name, c.live, c.want, "yes" if c.deploy_fixes else "no"]
            for c in actionable]
    header, *body = _table(["RANK", "CHECK", "LIVE", "WANT", "SITE.PY"], rows, keep=1)
    lines = [header]
    starts = [i for i, line in enumerate(body) if line[2:4].strip()]  # a row's first line
    for n, c in enumerate(actionable):
        end = starts[n + 1] if n + 1 < len(starts) else len(body)
        lines += body[starts[n]:end]
        for label, text in (("fix", c.fix), ("why", c.note)):
            if text:
                lines += textwrap.wrap(" ".join(text.split()), TABLE_WIDTH,
                                       initial_indent=f"        {label}: ",
                                       subsequent_indent=" " * 13)
    return lines


def render_table(host: str, checks: list[Check], engines: EngineRows = None) -> str:
    """The terminal report of one host (`engines`: the Engines section's rows)."""
    lines = [verdict(host, checks), ""]
    actionable = ranked(checks)
    if actionable:
        lines.append("Actionable, ranked (P0 runtime fix, P1 needs a reboot/restart, P2 minor)")
        lines += _actionable_lines(actionable)
        lines.append("")
    lines += engines_text(engines)
    good = fold_ok([c for c in checks if c.status == "ok"])
    if good:
        lines.append("Confirmed good")
        lines += _table(["CHECK", "LIVE", "NOTE"], [[c.name, c.live, c.note] for c in good])
        lines.append("")
    limits = fold_ok([c for c in checks if c.status == "limit"])
    if limits:
        lines.append("Known limits (the hardware's own: nothing to chase)")
        lines += _table(["CHECK", "LIVE", "WHY"],
                        [[c.name, c.live, c.fix.removeprefix("none: ")] for c in limits])
        lines.append("")
    absent = [c for c in checks if c.status == "n/a"]
    if absent:
        lines.append("Not present / not applicable")
        lines += _table(["CHECK", "WHY"], [[c.name, c.live] for c in absent])
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
    """The Markdown report of one host (every check, nothing folded; the Engines section)."""
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


def to_json(host: str, checks: list[Check], engines: EngineRows = None,
            now: float | None = None) -> dict:
    """The machine-readable report: its schema version (REPORT_SCHEMA_VERSION: raised when a
    key changes meaning or goes away), the gpunode version, host, when (UTC, ISO 8601),
    verdict, counts, pending work and every check (ranked first, then ok, limit, n/a; each
    as Check.model_dump())."""
    order = {"P0": 0, "P1": 1, "P2": 2, "ok": 3, "limit": 4, "n/a": 5}
    when = datetime.fromtimestamp(time.time() if now is None else now, timezone.utc)
    return {
        "schema_version": REPORT_SCHEMA_VERSION,
        "gpunode_version": __version__,
        "host": host,
        "timestamp": when.isoformat(timespec="seconds").replace("+00:00", "Z"),
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
    """Write DIRECTORY/<host>.json and/or .md (local files, never on the node), each whole
    and without following a link (write_atomic)."""
    written: list[Path] = []
    formats = tuple(formats)
    if not formats:
        return written
    folder = Path(directory)
    stem = report_stem(host)
    if "json" in formats:
        path = folder / f"{stem}.json"
        write_atomic(path, json.dumps(to_json(host, checks, engines=engines), indent=2) + "\n")
        written.append(path)
    if "md" in formats:
        path = folder / f"{stem}.md"
        write_atomic(path, render_markdown(host, checks, engines))
        written.append(path)
    return written


ACTIVE_ON = frozenset({"1", "true", "yes", "on"})
ACTIVE_OFF = frozenset({"", "0", "false", "no", "off"})
ACTIVE_TIMEOUT_S = 120
ENGINE_METRICS_TIMEOUT_S = 5


def _opt_in_seconds(key: str, flag: object, timeout: object, default: int,
                    pattern: str, low: int, high: int) -> int | None:
    """`--data KEY=1 [KEY_timeout=S]` -> seconds (default when S is not given), None when
    KEY is off; ValueError naming the key and what is allowed otherwise."""
    text = "" if flag is None else str(flag).strip().lower()
    if text in ACTIVE_OFF:
        return None
    if text not in ACTIVE_ON:
        raise ValueError(f"{key}={flag!r}: use 1 (on) or 0 (off)")
    if timeout is None or str(timeout).strip() == "":
        return default
    value = str(timeout).strip()
    if not re.match(pattern, value) or not low <= int(value) <= high:
        raise ValueError(f"{key}_timeout={timeout!r}: give seconds, {low}..{high}")
    return int(value)


def engine_metrics_timeout(flag: object, timeout: object) -> int | None:
    """`--data gpunode_audit_engine_metrics=1 [gpunode_audit_engine_metrics_timeout=S]` ->
    seconds per engine's /metrics read, None when off (the default); ValueError otherwise."""
    return _opt_in_seconds("gpunode_audit_engine_metrics", flag, timeout,
                           ENGINE_METRICS_TIMEOUT_S, r"^[0-9]{1,2}$", 1, 60)


def active_timeout(active: object, timeout: object) -> int | None:
    """`--data gpunode_audit_active=1 [gpunode_audit_active_timeout=S]` -> seconds per
    bandwidth test, None when the active mode is off; ValueError otherwise."""
    return _opt_in_seconds("gpunode_audit_active", active, timeout, ACTIVE_TIMEOUT_S,
                           r"^[0-9]{2,4}$", 10, 3600)
