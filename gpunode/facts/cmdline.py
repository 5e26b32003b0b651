"""Kernel command line: booted (/proc/cmdline) and configured (GRUB or systemd-boot)."""

from __future__ import annotations

import re

from pydantic import Field
from pyinfra.api import FactBase

from gpunode.facts.proxmox import EspProblem, parse_proxmox_boot_tool_status
from gpunode.facts.sections import (
    FactModel,
    cat_command,
    section_command,
    split_sections,
)
from gpunode.facts.shell_assign import ASSIGNMENT, assignment_line, assignments

GRUB_DEFAULT_FILE = "/etc/default/grub"
KERNEL_CMDLINE_FILE = "/etc/kernel/cmdline"
GRUB_CMDLINE_VAR = "GRUB_CMDLINE_LINUX_DEFAULT"
#: update-grub (grub-mkconfig) sources /etc/default/grub, then these files in name order: a
#: drop-in that sets GRUB_CMDLINE_LINUX_DEFAULT or GRUB_DEFAULT overrides the main file.
GRUB_DROPIN_DIR = "/etc/default/grub.d"
#: gpunode's own drop-in, named to be read last, written only when another drop-in overrides.
GPUNODE_GRUB_DROPIN = f"{GRUB_DROPIN_DIR}/zz-gpunode.cfg"
_DROPIN_HEADER = re.compile(r"^==> (?P<path>/\S+) <==$")


class CmdlineState(FactModel):
    """What the kernel booted with and what the bootloader config will boot next."""


    booted: list[str] = []
    grub_default_text: str | None = None
    kernel_cmdline_text: str | None = None
    systemd_boot: bool = False
    esp_problems: list[EspProblem] = Field(default_factory=list)
    """ESPs `proxmox-boot-tool status` skipped (stale UUID, failed mount): no kernel or
    command line reaches them (gpunode.facts.proxmox)."""
    grub_dropins: dict[str, str] = {}
    """/etc/default/grub.d/*.cfg: path -> text (update-grub sources them after the main file)."""

    @property
    def configured(self) -> list[str]:
        """Tokens the next boot gets: /etc/kernel/cmdline, or GRUB_CMDLINE_LINUX_DEFAULT as
        update-grub sees it after /etc/default/grub and every drop-in."""
        if self.systemd_boot:
            return split_cmdline(self.kernel_cmdline_text or "")
        return split_cmdline(self.grub_value(GRUB_CMDLINE_VAR)[0])

    def grub_value(self, var: str, skip: tuple[str, ...] = ()) -> tuple[str, str | None]:
        """(value of var as update-grub sees it, the file that set it last) (see
        grub_effective_value); `skip` leaves drop-ins out (gpunode's own)."""
        return grub_effective_value(self.grub_default_text or "", self.grub_dropins, var, skip)

    def dropins_setting(self, var: str) -> list[str]:
        """Drop-ins other than gpunode's that assign var, in the order update-grub reads them."""
        return sorted(p for p, text in self.grub_dropins.items()
                      if p != GPUNODE_GRUB_DROPIN and assigns(text, var))


def split_cmdline(text: str) -> list[str]:
    """Split a kernel command line into tokens, keeping double-quoted values whole."""
    tokens: list[str] = []
    current = ""
    quoted = False
    for char in text.strip():
        if char == '"':
            quoted = not quoted
        if char.isspace() and not quoted:
            if current:
                tokens.append(current)
            current = ""
        else:
            current += char
    if current:
        tokens.append(current)
    return tokens


def token_key(token: str) -> str:
    """The parameter name of a token ('a.b=1' -> 'a.b'; 'quiet' -> 'quiet')."""
    return token.split("=", 1)[0]


def format_param(key: str, value: str | None) -> str:
    """One cmdline token from a key and an optional value."""
    return key if value is None else f"{key}={value}"


def merge_cmdline(tokens: list[str], wanted: dict[str, str | None]) -> list[str]:
    """Set each wanted parameter once: replace it in place, append it if absent, keep the rest."""
    out: list[str] = []
    placed: set[str] = set()
    for token in tokens:
        key = token_key(token)
        if key not in wanted:
            out.append(token)
        elif key not in placed:
            out.append(format_param(key, wanted[key]))
            placed.add(key)
    out.extend(format_param(k, v) for k, v in wanted.items() if k not in placed)
    return out


def missing_params(tokens: list[str], wanted: dict[str, str | None]) -> dict[str, str | None]:
    """Wanted parameters that the token list lacks or holds with another value."""
    present = set(tokens)
    return {k: v for k, v in wanted.items() if format_param(k, v) not in present}


def grub_cmdline_value(text: str, var: str = GRUB_CMDLINE_VAR,
                       where: str = GRUB_DEFAULT_FILE) -> str:
    """The value of the last assignment of var in /etc/default/grub ('' when absent), read as
    `sh` reads it (shell_assign; ShellValueError naming the file and line if it can't be)."""
    found = assignments(text, var, where)
    return found[-1][1].value() if found else ""


def assigns(text: str, var: str) -> bool:
    """True when the shell text assigns var at the start of a line."""
    return any((m := ASSIGNMENT.match(line)) and m.group("name") == var
               for line in text.splitlines())


def grub_effective_value(
    default_text: str, dropins: dict[str, str], var: str, skip: tuple[str, ...] = ()
) -> tuple[str, str | None]:
    """var after /etc/default/grub, then the drop-ins in name order, as update-grub sources
    them: each assignment replaces the value, and "$var" / "${var}" in it stand for the value
    so far (the usual append idiom). Returns (value, the file of the last assignment)."""
    value, source = "", None
    files = [(GRUB_DEFAULT_FILE, default_text), *sorted(dropins.items())]
    for path, text in files:
        if path in skip:
            continue
        for _, assignment in assignments(text, var, path):
            value, source = assignment.value(value), path
    return value, source


def parse_grub_dropins(text: str) -> dict[str, str]:
    """'==> PATH <==' headed file texts (the fact's listing of grub.d) -> {path: text}."""
    files: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in text.splitlines():
        header = _DROPIN_HEADER.match(line)
        if header:
            current = files.setdefault(header.group("path"), [])
        elif current is not None:
            current.append(line)
    return {path: "\n".join(lines).rstrip("\n") + "\n" for path, lines in files.items()}


def edit_grub_default(text: str, tokens: list[str], var: str = GRUB_CMDLINE_VAR) -> str:
    """Rewrite the last assignment of var with the tokens (quoted so `sh` reads back each
    word, its indent and comment kept); add one if the file has none."""
    lines = text.splitlines(keepends=True)
    found = assignments(text, var, GRUB_DEFAULT_FILE)
    if found:
        index, old = found[-1]
        ending = lines[index][len(lines[index].rstrip("\r\n")):]
        lines[index] = assignment_line(var, " ".join(tokens), old.lead, old.suffix) + ending
        return "".join(lines)
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n"
    return "".join(lines) + assignment_line(var, " ".join(tokens)) + "\n"


def parse_cmdline_sections(text: str) -> CmdlineState:
    """Parse the output of CMDLINE_COMMAND."""
    sections = split_sections(text)
    grub = sections.get("grub_default")
    kernel = sections.get("kernel_cmdline")
    boottool = sections.get("boottool_mode", "").strip()
    status_text = sections.get("boottool_status", "")
    return CmdlineState(
        booted=split_cmdline(sections.get("proc_cmdline", "")),
        grub_default_text=(grub + "\n") if grub is not None and sections.get("has_grub") else None,
        kernel_cmdline_text=kernel if sections.get("has_kernel_cmdline") else None,
        systemd_boot=boottool == "uefi" or "configured with: uefi" in status_text,
        esp_problems=parse_proxmox_boot_tool_status(status_text).esp_problems,
        grub_dropins=parse_grub_dropins(sections.get("grub_dropins", "")),
    )


CMDLINE_COMMAND = "; ".join(
    [
        section_command("proc_cmdline", cat_command("/proc/cmdline")),
        section_command("has_grub", f"test -f {GRUB_DEFAULT_FILE} && echo yes"),
        section_command("grub_default", cat_command(GRUB_DEFAULT_FILE)),
        section_command(
            "grub_dropins",
            f"for f in {GRUB_DROPIN_DIR}/*.cfg; do [ -f \"$f\" ] || continue; "
            "printf '==> %s <==\\n' \"$f\"; " + cat_command('"$f"') + "; echo; done",
        ),
        section_command("has_kernel_cmdline", f"test -f {KERNEL_CMDLINE_FILE} && echo yes"),
        section_command("kernel_cmdline", cat_command(KERNEL_CMDLINE_FILE)),
        # stderr too: the tool prints skipped ESPs there (WARN ... does not exist, mount of
        # ... failed).
        section_command(
            "boottool_status",
            "command -v proxmox-boot-tool >/dev/null && proxmox-boot-tool status 2>&1",
        ),
    ]
)


class KernelCmdline(FactBase):
    """Booted and configured kernel command line."""

    def command(self) -> str:
        return CMDLINE_COMMAND

    def process(self, output: list[str]) -> CmdlineState:
        return parse_cmdline_sections("\n".join(output))
