"""cat_command and ls_command (shell builtins instead of a process each) print what cat and ls
print, run here in the real sh on scratch files; KernelCmdline's GRUB drop-ins through them."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from gpunode.facts.cmdline import CMDLINE_COMMAND, GRUB_DROPIN_DIR, parse_cmdline_sections
from gpunode.facts.sections import cat_command, ls_command


def sh(command: str) -> str:
    return subprocess.run(["sh", "-c", command], capture_output=True, text=True).stdout


@pytest.mark.parametrize("text", [
    "one line\n",
    "no final newline",
    "\ttabs\tand  trailing spaces  \n\nblank line above\n",
    'back\\slash "quotes" $(not run) `nor this`\n',
    "",
])
def test_cat_command_prints_the_file(tmp_path, text):
    path = tmp_path / "f"
    path.write_text(text)
    expected = text if text.endswith("\n") or not text else text + "\n"
    assert sh(cat_command(str(path))) == expected


# The kernel files the facts read with cat_command (seq_file /proc, sysfs), where this
# machine has them: byte-a-call reads must give what cat gives (/proc/sys would not).
KERNEL_FILES = ["/proc/cmdline", "/proc/1/limits", "/proc/modules",
                "/sys/devices/system/cpu/cpuidle/current_driver",
                "/sys/devices/system/cpu/cpu0/cpufreq/scaling_driver",
                "/sys/devices/system/cpu/online"]


@pytest.mark.parametrize("path", [p for p in KERNEL_FILES if Path(p).exists()])
def test_cat_command_reads_kernel_files_whole(path):
    assert sh(cat_command(path)) == sh(f"cat {path}")


def test_cat_command_of_a_missing_file_prints_nothing(tmp_path):
    assert sh("{ " + cat_command(str(tmp_path / "none")) + "; } 2>/dev/null; echo after") == (
        "after\n")


def test_ls_command_lists_names_as_ls(tmp_path):
    for name in ("b", "a", "0", "with space"):
        (tmp_path / name).touch()
    (tmp_path / ".hidden").touch()
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    listed = sh(ls_command(str(tmp_path))).splitlines()
    assert sorted(listed) == sorted(sh(f"ls -1 {tmp_path}").splitlines())
    assert sh(ls_command(str(tmp_path / "empty"))) == ""


def test_grub_dropins_are_read_through_the_builtin_cat(tmp_path: Path):
    (tmp_path / "50-cloud.cfg").write_text('GRUB_CMDLINE_LINUX_DEFAULT="console=ttyS0"\n')
    (tmp_path / "90-last.cfg").write_text('GRUB_CMDLINE_LINUX="$GRUB_CMDLINE_LINUX quiet"')
    out = sh(CMDLINE_COMMAND.replace(GRUB_DROPIN_DIR, str(tmp_path)))
    assert parse_cmdline_sections(out).grub_dropins == {
        str(tmp_path / "50-cloud.cfg"): 'GRUB_CMDLINE_LINUX_DEFAULT="console=ttyS0"\n',
        str(tmp_path / "90-last.cfg"): 'GRUB_CMDLINE_LINUX="$GRUB_CMDLINE_LINUX quiet"\n',
    }
