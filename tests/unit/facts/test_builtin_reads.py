"""cat_command, ls_command and grep_lines_command (shell builtins instead of a process each)
print what cat, ls and grep -H print, run here in the real sh on scratch files (and this
machine's sysfs); KernelCmdline's GRUB drop-ins through them."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from gpunode.facts.cmdline import CMDLINE_COMMAND, GRUB_DROPIN_DIR, parse_cmdline_sections
from gpunode.facts.sections import cat_command, grep_lines_command, ls_command


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


def test_grep_lines_command_prints_what_grep_prints(tmp_path):
    """PATH:LINE for each non-empty line, as `grep -H .` (and `grep -H -v -E ' 0$'`, but for
    empty lines) prints them; a missing file or an unmatched glob prints nothing."""
    texts = {"one": "0x030000\n", "multi": "RxErr 0\nBadTLP 3\n\nTOTAL_ERR_COR 3\n",
             "bare": "8.0 GT/s PCIe", "empty": "", "zeros": "RxErr 0\nTOTAL_ERR_COR 0\n"}
    for name, text in texts.items():
        (tmp_path / name).write_text(text)
    paths = " ".join(str(tmp_path / n) for n in [*texts, "missing"]) + f" {tmp_path}/x*/none"
    grep = subprocess.run(f"grep -H . {paths}", shell=True, capture_output=True, text=True)
    assert sh(grep_lines_command(paths)) == grep.stdout
    nonzero = subprocess.run(f"grep -H -v -E ' 0$' {paths}", shell=True, capture_output=True,
                             text=True).stdout
    assert sh(grep_lines_command(paths, skip="*' 0'")) == "".join(
        line + "\n" for line in nonzero.splitlines() if not line.endswith(":"))
    assert "BadTLP 3" in nonzero and sh(grep_lines_command(f"{tmp_path}/zeros", "*' 0'")) == ""


# sysfs files the facts read with grep_lines_command, where this machine has them; a node's
# cpulist is the counter-example: a binary attribute on newer kernels (6.18 here), it reads
# empty a byte a call (so gpunode.facts.gpu_numa keeps grep for it)
SYSFS_GLOBS = ["/sys/kernel/iommu_groups/*/type", "/sys/bus/pci/devices/*/numa_node",
               "/sys/bus/pci/devices/*/class", "/sys/bus/pci/devices/*/current_link_speed",
               "/sys/bus/pci/devices/*/max_link_width",
               "/sys/devices/system/cpu/cpu[0-9]*/cpuidle/state[0-9]*/name",
               "/sys/devices/system/cpu/cpu[0-9]*/cpuidle/state[0-9]*/latency"]


@pytest.mark.parametrize("glob", SYSFS_GLOBS)
def test_grep_lines_command_on_this_machines_sysfs(glob):
    grep = subprocess.run(f"grep -H . {glob}", shell=True, capture_output=True, text=True)
    assert sh(grep_lines_command(glob)) == grep.stdout

