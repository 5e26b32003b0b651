"""The end-of-run summary a person reads, per host (pure; at most 100 columns with pyinfra's
4-space indent).

    gpunode-lab: summary of this run
      changed          2 operations: Persist kernel cmdline; Reboot to apply: cmdline ...
      unchanged        16 operations
      pending reboot   none
      pending restart  none
      refused          PCIe MaxReadReq 0000:01:00.0 [8086:10d3]: reads 128 bytes, wants ...
      verified 20/33   20 read back as the profile wants; 0 open (P0/P1), 0 minor (P2);
                       2 refused by the hardware; 11 not read here: no cpuidle states (1), ...

"verified N/M": of the M checks of the node (the profile's settings, then the hardware, GPU,
driver, kernel and container checks of the audit), N were read back from the live node and
equal what the profile wants. The rest are open (P0 fixable now, P1 needs a reboot), minor
(P2), refused by the hardware (limits: nothing to chase), or could not be read on this node,
each with why (no GPU, no cpuidle states, no RDMA device...).
"""

from __future__ import annotations

import textwrap
from collections.abc import Iterable

from gpunode.profile.check import Check, pending

WIDTH = 96  # pyinfra indents every line by 4 columns
LABEL = 17
MAX_NAMES = 8


def _field(label: str, text: str) -> list[str]:
    """'  LABEL  text', text wrapped under itself."""
    first = f"  {label:<{LABEL}}"
    return textwrap.wrap(text, WIDTH, initial_indent=first,
                         subsequent_indent=" " * len(first), break_on_hyphens=False) or [first]


def _items(label: str, items: list[str]) -> list[str]:
    """'  LABEL  item', one item a line (each wrapped under itself), or 'none'."""
    if not items:
        return _field(label, "none")
    indent = " " * len(f"  {label:<{LABEL}}")
    lines = _field(label, items[0])
    for item in items[1:]:
        lines += textwrap.wrap(item, WIDTH, initial_indent=indent, subsequent_indent=indent,
                               break_on_hyphens=False)
    return lines


def _names(names: list[str]) -> str:
    shown = "; ".join(names[:MAX_NAMES])
    more = len(names) - MAX_NAMES
    return shown + (f"; and {more} more" if more > 0 else "")


def _grouped(reasons: Iterable[str]) -> str:
    """'no GPU (6), no cpuidle states (1)': why checks could not be read, most frequent first."""
    counts: dict[str, int] = {}
    for reason in reasons:
        key = " ".join(reason.split())
        counts[key] = counts.get(key, 0) + 1
    ordered = sorted(counts.items(), key=lambda item: -item[1])
    return ", ".join(f"{reason} ({n})" for reason, n in ordered)


def verified_text(checks: list[Check]) -> tuple[str, str]:
    """('verified N/M', what N and the rest of M are)."""
    by = {status: [c for c in checks if c.status == status]
          for status in ("ok", "P0", "P1", "P2", "limit", "n/a")}
    open_ = len(by["P0"]) + len(by["P1"])
    parts = [f"{len(by['ok'])} read back as the profile wants",
             f"{open_} open (P0/P1), {len(by['P2'])} minor (P2)"]
    if by["limit"]:
        parts.append(f"{len(by['limit'])} refused by the hardware")
    if by["n/a"]:
        parts.append(f"{len(by['n/a'])} not read here: "
                     + _grouped(f"{c.name}: {c.live}" if len(by["n/a"]) <= 3 else c.live
                                for c in by["n/a"]))
    return f"verified {len(by['ok'])}/{len(checks)}", "; ".join(parts)


def open_lines(host_name: str, checks: list[Check]) -> list[str]:
    """One wrapped entry per check that is open or minor (P0, P1, P2), with its fix."""
    lines: list[str] = []
    for c in checks:
        if c.status not in ("P0", "P1", "P2"):
            continue
        head = f"{host_name}: {c.status} {c.name}: {c.live}" + (f" -> {c.want}" if c.want else "")
        lines += textwrap.wrap(" ".join(head.split()), WIDTH, subsequent_indent="      ")
        if c.fix:
            lines += textwrap.wrap(" ".join(c.fix.split()), WIDTH, initial_indent="      fix: ",
                                   subsequent_indent="           ")
    return lines


def run_summary(host_name: str, changed: list[str], unchanged: int, failed: list[str],
                checks: list[Check]) -> list[str]:
    """The summary block of one host: operations, pending work, refusals, the read-back."""
    lines = [f"{host_name}: summary of this run"]
    lines += _field("changed", f"{len(changed)} operation(s)"
                    + (f": {_names(changed)}" if changed else ""))
    lines += _field("unchanged", f"{unchanged} operation(s)")
    if failed:
        lines += _field("failed", _names(failed))
    waiting = pending(checks)
    lines += _items("pending reboot", waiting["reboot"])
    lines += _items("pending restart", waiting["restart"])
    refused = [c.fix.removeprefix("none: ") if c.fix else f"{c.name}: {c.live}, wants {c.want}"
               for c in checks if c.status == "limit" and c.want]
    lines += _items("refused", refused)
    label, text = verified_text(checks)
    lines += _field(label, text)
    return lines
