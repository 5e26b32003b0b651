"""Shell variable assignments read as `sh` reads them, and written so `sh` reads them back.

update-grub sources /etc/default/grub (and grub.d/*.cfg) as shell. A value is parsed with the
POSIX quoting rules (single quotes, double quotes with their four escapes, backslash outside
quotes) and a trailing `# comment`; what cannot be kept is refused (ShellValueError naming the
file, the line and the fix): a command substitution `$(...)` or backquote, another variable's
expansion, a shell operator, more words after the value, an unclosed quote. `$VAR` / `${VAR}`
of the variable itself (the append idiom) stands for its value so far (SELF). A new value is
written in double quotes when that is exact, else in single quotes (shlex.quote), so every
word comes back as written; the line's comment is kept.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

#: The assignment of a variable at the start of a line (optionally `export`ed).
ASSIGNMENT = re.compile(
    r"^(?P<lead>\s*(?:export\s+)?)(?P<name>[A-Za-z_][A-Za-z0-9_]*)=(?P<raw>.*)$"
)
SELF = object()
"""The variable's own value so far, where the text says $VAR or ${VAR}."""
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_OPERATORS = set(";&|<>()")
_DOUBLE_ESCAPES = set('$`"\\')


class ShellValueError(ValueError):
    """An assignment gpunode can't read or rewrite without changing its meaning."""


@dataclass(frozen=True)
class Assignment:
    """One parsed `NAME=value` line: the value's pieces (text and SELF) and what follows."""

    name: str
    parts: tuple[object, ...]
    lead: str
    suffix: str

    def value(self, before: str = "") -> str:
        """The value, with SELF replaced by `before` (the variable's earlier value)."""
        return "".join(before if part is SELF else str(part) for part in self.parts)


def _refuse(where: str, name: str, raw: str, why: str) -> ShellValueError:
    return ShellValueError(
        f"{where}: {name}={raw.strip()}: {why}; gpunode can't rewrite it without changing what "
        f"it means. Fix: write it as {name}=\"word word ...\" (literal words, no $(...), "
        f"backquotes or other variables; ${name} to append is fine), then run again"
    )


def _expansion(raw: str, at: int, name: str) -> tuple[object, int, str]:
    """(SELF or '$', index after it, '' or why it is refused) for the '$' at raw[at]."""
    rest = raw[at + 1:]
    if rest.startswith("{"):
        inner, closed, _ = rest[1:].partition("}")
        if closed and inner == name:
            return SELF, at + 3 + len(inner), ""
        return "", at, "a ${...} expansion of another variable"
    if rest.startswith("("):
        return "", at, "a command substitution $(...)"
    word = _NAME.match(rest)
    if word and word.group() == name:
        return SELF, at + 1 + len(name), ""
    if word or (rest and rest[0] in "0123456789@*#?$!-"):
        return "", at, f"an expansion of another variable (${(word.group() if word else rest[0])})"
    return "$", at + 1, ""


class _Reader:
    """One pass over the text after `NAME=`: the value's parts, then what follows it."""

    def __init__(self, name: str, raw: str, where: str):
        self.name, self.raw, self.where = name, raw, where
        self.parts: list[object] = []
        self.text, self.index, self.quote = "", 0, ""

    def refuse(self, why: str) -> ShellValueError:
        return _refuse(self.where, self.name, self.raw, why)

    def single_quoted(self, char: str) -> None:
        if char == "'":
            self.quote = ""
        elif char == "`" or self.raw.startswith("$(", self.index):
            raise self.refuse("a command substitution, even quoted")
        else:
            self.text += char
        self.index += 1

    def dollar(self) -> None:
        piece, self.index, why = _expansion(self.raw, self.index, self.name)
        if why:
            raise self.refuse(why)
        if piece is SELF:
            self.parts += [self.text, SELF]
            self.text = ""
        else:
            self.text += "$"

    def double_quoted(self, char: str) -> None:
        following = self.raw[self.index + 1:self.index + 2]
        if char == '"':
            self.quote = ""
        elif char == "\\" and following and following in _DOUBLE_ESCAPES:
            self.text += following
            self.index += 1
        else:
            self.text += char
        self.index += 1

    def unquoted(self, char: str) -> bool:
        """Read one unquoted character; True at the unquoted space that ends the value."""
        if char.isspace():
            rest = self.raw[self.index:].strip()
            if rest and not rest.startswith("#"):
                raise self.refuse(f"more words after the value ({rest!r})")
            return True
        if char in _OPERATORS:
            raise self.refuse(f"a shell operator ({char!r})")
        if char in "'\"":
            self.quote = char
        elif char == "\\":
            if self.index + 1 >= len(self.raw):
                raise self.refuse("a line continuation (\\ at the end)")
            self.index += 1
            self.text += self.raw[self.index]
        else:
            self.text += char
        self.index += 1
        return False

    def read(self) -> tuple[tuple[object, ...], str]:
        while self.index < len(self.raw):
            char = self.raw[self.index]
            if self.quote == "'":
                self.single_quoted(char)
            elif char == "`":
                raise self.refuse("a command substitution in backquotes")
            elif char == "$":
                self.dollar()
            elif self.quote == '"':
                self.double_quoted(char)
            elif self.unquoted(char):
                break
        if self.quote:
            raise self.refuse(f"an unclosed {self.quote} quote (a value over several lines)")
        parts = tuple(p for p in [*self.parts, self.text] if p != "")
        return parts, self.raw[self.index:]


def parse_value(name: str, raw: str, where: str) -> tuple[tuple[object, ...], str]:
    """(the value's parts, the text after it: spaces and a comment) of `raw`, the text after
    `NAME=` on one line; ShellValueError when it can't be kept (see the module docstring)."""
    return _Reader(name, raw, where).read()


def assignments(text: str, name: str, where: str) -> list[tuple[int, Assignment]]:
    """(line index, Assignment) for every assignment of `name` in shell text, in order."""
    found = []
    for number, line in enumerate(text.splitlines()):
        match = ASSIGNMENT.match(line)
        if match and match.group("name") == name:
            parts, suffix = parse_value(name, match.group("raw"), f"{where} line {number + 1}")
            found.append((number, Assignment(name, parts, match.group("lead"), suffix)))
    return found


def shell_quoted(value: str) -> str:
    """value as one shell word: in double quotes when nothing inside them is special, else in
    single quotes (shlex.quote); `sh` reads back exactly value."""
    if not any(char in _DOUBLE_ESCAPES for char in value):
        return f'"{value}"'
    return shlex.quote(value)


def assignment_line(name: str, value: str, lead: str = "", suffix: str = "") -> str:
    """`NAME="value"` with the line's own indent/export and trailing comment kept."""
    return f"{lead}{name}={shell_quoted(value)}{suffix}"
