"""Where values meet the shell, in one place.

- ``argv``: a command line from words, each quoted with shlex.quote, so a value is always
  one word and never shell syntax;
- ``script``: a shell snippet rendered from ``templates/shell/``, whose every variable goes
  through the ``shquote`` filter (a test checks every shell template for it);
- ``every_command``: several such commands of one operation in one remote shell.

Operations build their commands with these two; no value is put into shell text by hand.
"""

from __future__ import annotations

import shlex
from importlib.resources import files
from typing import Any

from jinja2 import DictLoader, Environment, StrictUndefined
from pyinfra.api import StringCommand


def _package_templates() -> dict[str, str]:
    """templates/<dir>/<name>.j2 read once at import (operation tests mock the file system,
    and an operation may render one: the GRUB drop-in)."""
    root = files("gpunode") / "templates"
    return {
        f"{folder.name}/{item.name}": item.read_text()
        for folder in root.iterdir() if folder.is_dir()
        for item in folder.iterdir() if item.name.endswith(".j2")
    }


TEMPLATES = Environment(
    loader=DictLoader(_package_templates()),
    undefined=StrictUndefined,
    keep_trailing_newline=True,
    trim_blocks=True,
    lstrip_blocks=True,
)
"""Every template of the package (files owned whole and shell snippets) in one environment;
shell templates quote every variable with it: {{ value | shquote }}."""
TEMPLATES.filters["shquote"] = lambda value: shlex.quote(str(value))


def quote(value: object) -> str:
    """One shell word for value (str() first: integers and paths alike)."""
    return shlex.quote(str(value))


def argv_text(*words: object) -> str:
    """The shell text of a command line whose every word is quoted."""
    return " ".join(quote(word) for word in words)


def argv(*words: object) -> StringCommand:
    """A command line from words, each quoted: `argv('apt-mark', 'hold', *packages)`."""
    return StringCommand(argv_text(*words))


def script_text(template: str, **variables: Any) -> str:
    """templates/shell/<template> rendered; its variables are quoted by the template."""
    return TEMPLATES.get_template(f"shell/{template}").render(**variables).strip("\n")


def script(template: str, **variables: Any) -> StringCommand:
    """A shell snippet from templates/shell/<template>, as one command."""
    return StringCommand(script_text(template, **variables))


def every_command(commands: list[str]) -> StringCommand:
    """Run every command in one shell, each in its own subshell (its `exit` ends only it), the
    later ones even when one fails, and exit 1 if any failed: one round trip, and each
    command's own output and error for its own setting. A single command is returned as is."""
    if len(commands) == 1:
        return StringCommand(commands[0])
    return StringCommand("rc=0; " + " ".join(f"( {c} ) || rc=1;" for c in commands)
                         + " exit $rc")
