"""Rewriting GRUB_CMDLINE_LINUX_DEFAULT keeps what the user wrote (issue 28, item 2): the
old and the new /etc/default/grub are sourced by the real /bin/sh, and the new value must be
the old words with gpunode's parameter added, every other variable unchanged; what can't be
kept is refused naming the file and line."""

from __future__ import annotations

import subprocess

import pytest

from gpunode.facts.cmdline import (
    edit_grub_default,
    grub_cmdline_value,
    grub_effective_value,
    merge_cmdline,
    split_cmdline,
)
from gpunode.facts.shell_assign import ShellValueError, shell_quoted

VAR = "GRUB_CMDLINE_LINUX_DEFAULT"
ADD = {"processor.max_cstate": "1"}


def sourced(text: str, tmp_path, names=(VAR, "GRUB_TIMEOUT", "OTHER")) -> dict[str, str]:
    """The variables after `. FILE` in /bin/sh (as update-grub sources it)."""
    path = tmp_path / "grub"
    path.write_text(text, encoding="utf-8")
    script = f". {path}; " + "; ".join(f'printf "%s\\0" "${{{n}-<unset>}}"' for n in names)
    out = subprocess.run(["/bin/sh", "-c", script], capture_output=True, check=True, env={})
    return dict(zip(names, out.stdout.decode().split("\0")[:-1], strict=True))


KEPT = [
    'GRUB_CMDLINE_LINUX_DEFAULT="quiet splash"\n',
    "GRUB_CMDLINE_LINUX_DEFAULT='quiet splash'\n",
    "GRUB_CMDLINE_LINUX_DEFAULT='quiet foo=\"a b\"'\n",
    'GRUB_CMDLINE_LINUX_DEFAULT="quiet"  # keep my comment\n',
    "GRUB_CMDLINE_LINUX_DEFAULT=quiet # a comment, not parameters\n",
    'GRUB_CMDLINE_LINUX_DEFAULT=""\n',
    "GRUB_CMDLINE_LINUX_DEFAULT=\n",
    'GRUB_CMDLINE_LINUX_DEFAULT="a\\"b c\\\\d \\$e"\n',
    "GRUB_CMDLINE_LINUX_DEFAULT=quiet\\ splash\n",
    "  export GRUB_CMDLINE_LINUX_DEFAULT='it'\"'\"'s'\n",
    'GRUB_CMDLINE_LINUX_DEFAULT="$GRUB_CMDLINE_LINUX_DEFAULT quiet"\n',
    "# GRUB_CMDLINE_LINUX_DEFAULT=$(commented out)\nGRUB_CMDLINE_LINUX_DEFAULT=\"quiet\"\n",
    'GRUB_CMDLINE_LINUX_DEFAULT="quiet processor.max_cstate=5 iommu=pt"\n',
    "",
]


@pytest.mark.parametrize("line", KEPT)
def test_rewrite_keeps_every_word_as_sh_reads_it(line, tmp_path):
    old = f"GRUB_TIMEOUT=5\n{line}OTHER='x y'\n"
    before = sourced(old, tmp_path)
    assert grub_cmdline_value(old) == before[VAR].replace("<unset>", "")
    tokens = merge_cmdline(split_cmdline(grub_cmdline_value(old)), ADD)
    new = edit_grub_default(old, tokens)
    after = sourced(new, tmp_path)
    assert after[VAR] == " ".join(tokens)
    assert after[VAR].split()[-1] == "processor.max_cstate=1" or "max_cstate=1 " in after[VAR]
    assert {k: v for k, v in after.items() if k != VAR} == {
        k: v for k, v in before.items() if k != VAR}
    if "#" in line and not line.startswith("#"):
        assert line[line.index("#"):] in new, "the user's comment stays"
    assert grub_cmdline_value(new) == after[VAR], "gpunode reads back what sh reads"


@pytest.mark.parametrize("value", ["quiet", 'a"b', "a'b", "$x", "a`b", "a\\b", "x y", ""])
def test_shell_quoted_round_trips_in_sh(value, tmp_path):
    assert sourced(f"{VAR}={shell_quoted(value)}\n", tmp_path)[VAR] == value


REFUSED = [
    ("GRUB_CMDLINE_LINUX_DEFAULT='quiet $(touch /tmp/x)'", "command substitution"),
    ('GRUB_CMDLINE_LINUX_DEFAULT="quiet $(id)"', "command substitution"),
    ("GRUB_CMDLINE_LINUX_DEFAULT='quiet `id`'", "command substitution"),
    ('GRUB_CMDLINE_LINUX_DEFAULT="quiet `id`"', "backquotes"),
    ('GRUB_CMDLINE_LINUX_DEFAULT="quiet $HOME"', "another variable"),
    ('GRUB_CMDLINE_LINUX_DEFAULT="quiet ${EXTRA}"', "another variable"),
    ('GRUB_CMDLINE_LINUX_DEFAULT="quiet', "unclosed"),
    ("GRUB_CMDLINE_LINUX_DEFAULT=quiet splash", "more words"),
    ('GRUB_CMDLINE_LINUX_DEFAULT="quiet";reboot', "operator"),
]


@pytest.mark.parametrize(("line", "why"), REFUSED)
def test_unkeepable_value_refused_naming_file_and_line(line, why):
    text = f"GRUB_TIMEOUT=5\n{line}\n"
    with pytest.raises(ShellValueError) as err:
        edit_grub_default(text, ["quiet", "processor.max_cstate=1"])
    message = str(err.value)
    assert "/etc/default/grub line 2" in message and why in message and "Fix:" in message


def test_dropin_append_idiom_still_reads_the_value_so_far():
    value, source = grub_effective_value(
        'GRUB_CMDLINE_LINUX_DEFAULT="quiet"\n',
        {"/etc/default/grub.d/a.cfg": 'GRUB_CMDLINE_LINUX_DEFAULT="${GRUB_CMDLINE_LINUX_DEFAULT}'
                                      ' iommu=pt"\n'}, VAR)
    assert (value, source) == ("quiet iommu=pt", "/etc/default/grub.d/a.cfg")
