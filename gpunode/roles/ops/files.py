"""Files gpunode owns whole: rendered from gpunode/templates/ (package data), written
atomically, old copy kept.

pyinfra's files.template writes over SFTP straight into the destination when connected as
root, so a cut connection can leave half a file; here the text goes to a temporary file beside
the destination and is renamed over it, and a differing old file is kept as a backup first.
"""

from __future__ import annotations

import hashlib
import shlex
from io import StringIO
from pathlib import Path
from typing import Any

from jinja2 import Environment, PackageLoader, StrictUndefined
from pyinfra import host
from pyinfra.api import FileUploadCommand, StringCommand, operation
from pyinfra.facts.files import Sha1File

from gpunode.roles.facts.cache import cached_fact

BACKUP_SUFFIX = ".gpunode-bak"

_environment = Environment(
    loader=PackageLoader("gpunode", "templates"),
    undefined=StrictUndefined,
    keep_trailing_newline=True,
    trim_blocks=True,
    lstrip_blocks=True,
)


def render_template(name: str, **variables: Any) -> str:
    """Render templates/<name> with the given variables (missing variables are errors)."""
    return _environment.get_template(name).render(**variables)


def sha1_text(text: str) -> str:
    return hashlib.sha1(text.encode()).hexdigest()


def atomic_write_commands(
    text: str, dest: str, mode: str, exists: bool, after: str | None = None
) -> list[Any]:
    """Upload beside dest, back up the old file, rename over it; run `after` on success."""
    temp = f"{dest}.gpunode-new"
    q_dest, q_temp = shlex.quote(dest), shlex.quote(temp)
    commands: list[Any] = [
        StringCommand(f"mkdir -p {shlex.quote(str(Path(dest).parent))}"),
        FileUploadCommand(StringIO(text), temp),
        StringCommand(f"chown root:root {q_temp} && chmod {mode} {q_temp}"),
    ]
    if exists:
        commands.append(StringCommand(f"cp -p {q_dest} {shlex.quote(dest + BACKUP_SUFFIX)}"))
    commands.append(StringCommand(f"mv -f {q_temp} {q_dest}"))
    if after:
        commands.append(StringCommand(after))
    return commands


@operation()
def owned_file(dest: str, text: str, mode: str = "644", after: str | None = None):
    """
    Make dest hold exactly text (root-owned, atomic rename, previous version kept).

    + dest: remote path
    + text: the whole content
    + mode: octal mode
    + after: shell command run after a change (e.g. `systemctl daemon-reload`)
    """
    remote_sha = cached_fact(Sha1File, path=dest)
    if remote_sha == sha1_text(text):
        host.noop(f"{dest} is up to date")
        return
    yield from atomic_write_commands(text, dest, mode, exists=remote_sha is not None, after=after)


def template_file(
    template: str, dest: str, mode: str = "644", after: str | None = None, **variables: Any
):
    """Add an owned_file operation for templates/<template> rendered with variables."""
    return owned_file(
        name=f"Write {dest}",
        dest=dest,
        text=render_template(template, **variables),
        mode=mode,
        after=after,
    )
