"""Many fact reads in one remote command: the live state a deploy needs, read at its start.

A deploy asks for a dozen facts (sysctls, lspci, cpuidle, the owned files' sha1 ...), and
pyinfra runs one remote command per fact. `FactBundle` runs each fact's own command in one
shell, in order, each between a begin marker and an end marker that carries its exit status;
`bundle_values()` turns each section into exactly what `host.get_fact` would have returned
(the fact's own `process()`, its `default()` for no output or a missing `requires_command`).
A section whose command failed, or whose output the fact can't process, gives no value: the
fact is then read on its own later, with pyinfra's own error handling.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from pyinfra.api import FactBase, StringCommand

from gpunode.facts.sections import MARKER as SECTION_MARKER
from gpunode.facts.systemd import SystemdUnits

BUNDLE_MARKER = "@@gpunode-bundle"
MISSING_COMMAND = f"{BUNDLE_MARKER}:missing-command"
_LINE = re.compile(rf"^{BUNDLE_MARKER}:(\d+):(begin|end:(\d+))$")


@dataclass(frozen=True)
class FactRead:
    """One fact read: the fact class and its arguments, as a cached_fact() call makes it;
    `part` names the fields its caller uses (the cache's key only: the command is the same)."""

    fact: type[FactBase]
    kwargs: dict[str, Any] = field(default_factory=dict)
    part: str | None = None

    def plain(self) -> FactRead:
        """The same read without its part (what the remote command is for)."""
        return self if self.part is None else FactRead(self.fact, self.kwargs)

    def key(self) -> str:
        """The arguments as the cache keys them (sorted JSON)."""
        return json.dumps(self.kwargs, sort_keys=True, default=str)

    def __repr__(self) -> str:  # pyinfra prints the bundle's arguments in its fact log
        args = ", ".join(f"{k}={v!r}" for k, v in sorted(self.kwargs.items()))
        part = f"[{self.part}]" if self.part else ""
        return f"{self.fact.__name__}{part}({args})"


@dataclass(frozen=True)
class Section:
    """One read's output lines and the exit status of its command."""

    status: int
    lines: list[str]


def bundleable(read: FactRead) -> bool:
    """Facts that run in sh with no precondition (those keep their own read)."""
    fact = read.fact()
    own_preconditions = type(fact).check_preconditions is not FactBase.check_preconditions
    return not fact.shell_executable and not own_preconditions


def _call(attribute: Any, kwargs: dict[str, Any]) -> Any:
    return attribute(**kwargs) if callable(attribute) else attribute


def read_command(read: FactRead) -> StringCommand:
    """The fact's own command, guarded by its requires_command as pyinfra guards it."""
    fact = read.fact()
    command = _call(fact.command, read.kwargs)
    required = _call(fact.requires_command, read.kwargs)
    if not required:
        return StringCommand("(", command, ")")
    return StringCommand(
        "if", "command", "-v", required, ">/dev/null", "2>&1;", "then", "(", command, ");",
        "else", "echo", f"'{MISSING_COMMAND}';", "fi",
    )


def section_command(index: int, read: FactRead) -> StringCommand:
    """Begin marker, the read's command (stderr dropped), newline, end marker with status."""
    return StringCommand(
        f"echo '{BUNDLE_MARKER}:{index}:begin';", "{", read_command(read), "2>/dev/null;",
        "}", f"; s=$?; printf '\\n{BUNDLE_MARKER}:{index}:end:%s\\n' \"$s\"",
    )


def bundle_command(reads: list[FactRead]) -> StringCommand:
    return StringCommand(*[part for i, read in enumerate(reads)
                           for part in (section_command(i, read), ";")], "true")


def split_bundle(lines: list[str]) -> dict[int, Section]:
    """Output lines of bundle_command() -> index -> Section; unterminated sections dropped."""
    sections: dict[int, Section] = {}
    current: tuple[int, list[str]] | None = None
    for line in lines:
        match = _LINE.match(line)
        if not match:
            if current is not None:
                current[1].append(line)
            continue
        index = int(match.group(1))
        if match.group(2) == "begin":
            current = (index, [])
        elif current is not None and current[0] == index:
            body = current[1]
            # the printf's newline ends a last line without one, or adds one empty line
            if body and body[-1] == "":
                body = body[:-1]
            sections[index] = Section(status=int(match.group(3)), lines=body)
            current = None
    return sections


_NO_VALUE = object()


def section_value(read: FactRead, section: Section) -> Any:
    """What host.get_fact(read.fact, **read.kwargs) returns for this output, or _NO_VALUE."""
    fact = read.fact()
    if section.status != 0:
        return _NO_VALUE
    if not section.lines or section.lines == [MISSING_COMMAND]:
        return fact.default()
    # Some facts keep their arguments on the instance in command() for process() to use
    # (pyinfra's Sha1File keeps the path), as pyinfra calls both on one instance.
    _call(fact.command, read.kwargs)
    try:
        return fact.process(section.lines)
    except Exception:  # noqa: BLE001 - the fact's own read reports it properly
        return _NO_VALUE


def borrowing(read: FactRead, others: list[FactRead]) -> FactRead:
    """The read as a bundle with `others` issues it: a fact with `borrows` (section name ->
    the read whose command that section runs) leaves out the sections another read of the
    bundle runs anyway (its `borrowed` argument), and gets their output from it."""
    lenders = getattr(read.fact, "borrows", None)
    if not lenders or read.kwargs:
        return read
    present = {(other.fact, other.key()) for other in others}
    names = sorted(name for name, lender in lenders.items()
                   if (lender.fact, lender.key()) in present)
    return FactRead(read.fact, {"borrowed": names}) if names else read


def lend_sections(reads: list[FactRead], sections: dict[int, Section]) -> None:
    """Give each read issued by borrowing() its lenders' output as the sections it left out;
    when a lender's command failed, the borrower has no section (it is read on its own)."""
    index_of = {(read.fact, read.key()): index for index, read in enumerate(reads)}
    for index, read in enumerate(reads):
        names = read.kwargs.get("borrowed") if read.kwargs else None
        if not names or index not in sections:
            continue
        lenders: dict[str, FactRead] = getattr(read.fact, "borrows", {})
        lines = list(sections[index].lines)
        for name in names:
            lender = lenders[name]
            lent = sections.get(index_of.get((lender.fact, lender.key()), -1))
            if lent is None or lent.status != 0 or lent.lines == [MISSING_COMMAND]:
                del sections[index]
                break
            lines += [f"{SECTION_MARKER}{name}", *lent.lines, ""]  # "" as section_command's echo
        else:
            sections[index] = Section(sections[index].status, lines)


JOINT_FACTS: tuple[type[FactBase], ...] = (SystemdUnits,)
"""Facts whose one read answers reads of several others (their `joins`) with equal arguments."""


def _joint_read(read: FactRead, present: set[tuple]) -> FactRead | None:
    """The joint read that answers this read, when every fact it joins is read alike with
    arguments the joint fact takes (its `arguments`)."""
    if read.part is not None:
        return None
    for joint in JOINT_FACTS:
        joins = getattr(joint, "joins", ())
        if (read.fact in joins and set(read.kwargs) <= set(getattr(joint, "arguments", ()))
                and all((fact, read.key()) in present for fact in joins)):
            return FactRead(joint, read.kwargs)
    return None


def issued_reads(reads: list[FactRead]) -> tuple[list[FactRead], list[int]]:
    """What a bundle of these reads runs, and for each read the index of the run read whose
    section answers it: reads a joint fact answers together become one read of it, then a
    read with `borrows` leaves out what another run read runs anyway (borrowing())."""
    present = {(read.fact, read.key()) for read in reads}
    run: list[FactRead] = []
    source: list[int] = []
    run_index: dict[tuple, int] = {}
    for read in reads:
        issued = _joint_read(read, present) or read
        key = (issued.fact, issued.key())
        if key not in run_index:
            run_index[key] = len(run)
            run.append(issued)
        source.append(run_index[key])
    return [borrowing(read, run) for read in run], source


def bundle_values(reads: list[FactRead], lines: list[str]) -> dict[int, Any]:
    """Index of each read -> its fact value, for the reads whose section gave one (`lines`:
    the output of FactBundle, which runs issued_reads(reads))."""
    run, source = issued_reads(reads)
    sections = split_bundle(lines)
    lend_sections(run, sections)
    values = {}
    for index, read in enumerate(reads):
        section = sections.get(source[index])
        if section is not None:
            value = section_value(read, section)
            if value is not _NO_VALUE:
                values[index] = value
    return values


class FactBundle(FactBase):
    """The output of many facts' commands, one section each (see bundle_values)."""

    def command(self, reads: list[FactRead]) -> StringCommand:
        return bundle_command(issued_reads(reads)[0])

    def process(self, output: list[str]) -> list[str]:
        return list(output)
