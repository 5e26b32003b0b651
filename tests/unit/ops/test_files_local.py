"""An owned file's text written by the command itself (staged_write, issue 31: one remote
command instead of a command, an upload and a command), run by the real /bin/sh the way
pyinfra sends it (`sh -c '...'`): the bytes land exactly, whatever the text holds."""

from __future__ import annotations

import shlex
import subprocess

import pytest
from pyinfra.api import FileUploadCommand, StringCommand

from gpunode.ops.files import INLINE_MAX, staged_write

TEXTS = [
    "vm.swappiness = 10\n",
    "no newline at the end",
    "quotes ' and \" and `backticks` and $(touch gpunode-pwned) and $HOME\n",
    "printf %s %d %% \\n \\\\ -- -x\n",
    "-starts with a dash\n\n\ttab, blank lines\n\n",
    "unicode: ÄÖÜ é ✓\n",
    "",
]


@pytest.mark.parametrize("text", TEXTS)
def test_the_text_lands_byte_for_byte(tmp_path, text):
    temp = tmp_path / "f.gpunode-new.run"
    (command,) = staged_write(StringCommand("true"), text, str(temp), StringCommand("true"))
    wrapped = f"sh -c {shlex.quote(command.get_raw_value())}"  # as pyinfra's connector sends it
    subprocess.run(["sh", "-c", wrapped], check=True, cwd=tmp_path)
    assert temp.read_bytes() == text.encode()
    assert not (tmp_path / "gpunode-pwned").exists()


def test_a_large_or_quote_heavy_text_is_uploaded():
    for text in ("x" * (INLINE_MAX + 1), "'" * (INLINE_MAX // 16)):
        commands = staged_write(StringCommand("true"), text, "/tmp/t", StringCommand("true"))
        assert [type(c) for c in commands] == [StringCommand, FileUploadCommand, StringCommand]
