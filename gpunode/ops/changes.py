"""Value-level change lines: what an operation will change (with --dry) or changes, old -> new.

Each gpunode operation that yields commands also calls report_change() once per setting:

    [lab] change: kernel.numa_balancing 1 -> 0 (runtime; persisted in /etc/sysctl.d/90-gpunode.conf)

The line is logged once per host and run (pyinfra evaluates an operation twice: change
detection, then execution), and kept on the state as a Change, so an end-of-run summary can
list them per host (changes_of()). With --diff, file content changes are also printed as a
unified diff (file_diff_lines()).
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Callable
from dataclasses import dataclass

from pyinfra import host, logger

from gpunode.pyinfra_adapter import (
    color_diff,
    current_state,
    diff_requested,
    host_prefix,
    run_store,
    stored,
)

_STATE_ATTRIBUTE = "_gpunode_changes"
_DIFFS_ATTRIBUTE = "_gpunode_diffs_shown"
WIDTH = 100
DIFF_INDENT = 10  # pyinfra's 4 columns, then the 6 of log_file_diff
_COLOUR = re.compile(r"^(\x1b\[[0-9;]*m)?(.*?)(\x1b\[0m)?$", re.S)


@dataclass(frozen=True)
class Change:
    """One setting that changes on one host."""

    host: str
    setting: str
    old: str | None = None
    new: str | None = None
    where: str | None = None

    def line(self) -> str:
        """'setting old -> new (where)', or 'setting: new' when there is no old value."""
        if self.old is None and self.new is not None:
            text = f"{self.setting}: {self.new}"
        elif self.old is None:
            text = self.setting
        else:
            text = f"{self.setting} {self.old} -> {self.new}"
        return f"{text} ({self.where})" if self.where else text


def _store() -> dict[str, list[Change]] | None:
    """This run's changes by host name (None outside a run)."""
    return run_store(_STATE_ATTRIBUTE) if current_state() is not None else None


def changes_of(state: object, host_name: str) -> list[Change]:
    """The changes reported for a host in this run, in order."""
    return list(stored(state, _STATE_ATTRIBUTE).get(host_name, []))


def shorten(text: str, width: int = 40) -> str:
    """Long values ('4096 87380 134217728 ...') cut to width with an ellipsis."""
    return text if len(text) <= width else text[: width - 3] + "..."


def report_change(setting: str, old: str | None = None, new: str | None = None,
                  where: str | None = None) -> Change:
    """Log the change once per host and run, and keep it for the summary."""
    change = Change(host=host.name, setting=setting, old=old, new=new, where=where)
    store = _store()
    if store is not None:
        seen = store.setdefault(host.name, [])
        if change in seen:
            return change
        seen.append(change)
    _log(f"change: {change.line()}")
    return change


def _log(message: str) -> None:
    """One log line; past WIDTH columns (with pyinfra's indent and the host prefix) the
    trailing '(where)' goes on a line of its own, and a change still too long continues on
    lines of its own, each indented under the change."""
    prefix = host_prefix(host)
    indent = len(host.name) + 7  # pyinfra's 4 spaces, the brackets and a space
    if indent + len(message) <= WIDTH:
        logger.info(f"{prefix}{message}")
        return
    head, sep, tail = message.rpartition(" (")
    if not sep or not tail.endswith(")"):
        head, sep = message, ""
    more = " " * indent + "  "
    lines = textwrap.wrap(head, WIDTH - 4, initial_indent=" " * (indent - 4),
                          subsequent_indent=more, break_on_hyphens=False,
                          break_long_words=False)
    logger.info(f"{prefix}{lines[0].strip()}")
    for line in lines[1:]:
        logger.info(line)
    if sep:
        logger.info(f"{more}({tail}")


def wrapped(text: str, width: int = WIDTH - 4) -> str:
    """text in lines of at most width columns once pyinfra indents it by 4: one message (one
    warning for pyinfra's count), the words past width on lines of their own, 2 further in."""
    lines = textwrap.wrap(" ".join(text.split()), width, subsequent_indent="  ",
                          break_on_hyphens=False, break_long_words=False) or [""]
    return "\n".join([lines[0], *(f"    {line}" for line in lines[1:])])


def log_wrapped(log: Callable[[str], object], text: str) -> None:
    """Log text (a gpunode message that may be long) within WIDTH columns (wrapped())."""
    log(wrapped(text))


def diff_enabled() -> bool:
    """True with --diff."""
    return diff_requested()


def file_diff_lines(old_text: str | None, new_text: str) -> list[str]:
    """Unified diff lines (pyinfra's own colouring) from the old content to the new."""
    old_lines = (old_text or "").splitlines(keepends=True)
    return color_diff(old_lines, new_text.splitlines(keepends=True))


def _cut(text: str, width: int) -> int:
    """Where to cut text to width columns: after its last space past two thirds, else at width."""
    space = text.rfind(" ", width * 2 // 3, width)
    return space + 1 if space > 0 else width


def folded_diff_line(line: str, width: int = WIDTH - DIFF_INDENT) -> list[str]:
    """A diff line in lines of at most width columns: what goes past width continues on the
    next line after the line's sign and '...' ('+ ... rest'), in the line's colour."""
    start, text, end = _COLOUR.match(line).groups()  # type: ignore[union-attr]
    parts, more = [], text[:1] + " ... "
    while len(text) > width:
        cut = _cut(text, width)
        parts.append(text[:cut].rstrip())
        text, width = more + text[cut:], WIDTH - DIFF_INDENT
    parts.append(text)
    return [f"{start or ''}{part}{end or ''}" for part in parts]


def log_file_diff(path: str, old_text: str | None, new_text: str) -> None:
    """With --diff: the content change of path, once per host and run."""
    if current_state() is not None:
        seen = run_store(_DIFFS_ATTRIBUTE)  # used as a set
        key = str((host.name, path, old_text, new_text))
        if key in seen:
            return
        seen[key] = True
    _log(f"{'Will create' if old_text is None else 'Will modify'} {path}")
    for line in file_diff_lines(old_text, new_text):
        for part in folded_diff_line(line):
            logger.info("      %s", part)
