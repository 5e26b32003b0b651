"""A node for the verify timer's script, without a node: a copy of the /proc and /sys it reads
(GPUNODE_VERIFY_ROOT) and a PATH that holds only the tools the script runs (coreutils, grep,
sed: linked from this machine) and stand-ins that replay captured outputs (setpci, systemctl,
nvidia-smi, journalctl). Nothing of this machine's own GPUs or kernel log can leak in: a tool
that is not here is missing, as on a node without it."""

from __future__ import annotations

import shlex
import shutil
import subprocess
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from gpunode.facts.pcie import parse_lspci_vvv
from gpunode.ops.pcie import ACS_BITS

DATA = Path(__file__).resolve().parents[1] / "data"
TOOLS = ("cat", "chmod", "cut", "date", "grep", "mkdir", "mktemp", "mv", "readlink", "rm", "sed",
         "sort", "timeout", "tr", "uname", "uniq")
"""What the script runs besides the stand-ins (dash's builtins aside)."""


def read(relative: str) -> str:
    return (DATA / relative).read_text(encoding="utf-8")


def tool_path(folder: Path, stand_ins: dict[str, str]) -> str:
    """A PATH of TOOLS and the stand-ins ({name: sh body})."""
    folder.mkdir(parents=True)
    for name in TOOLS:
        real = shutil.which(name)
        assert real, f"{name} is needed to run the verify script"
        (folder / name).symlink_to(real)
    for name, body in stand_ins.items():
        (folder / name).write_text(f"#!/bin/sh\n{body}\n")
        (folder / name).chmod(0o755)
    return str(folder)


def replay(*relatives: str, when: str = "") -> str:
    """A stand-in's body that prints captures (when the shell test WHEN holds of its args)."""
    cat = "cat " + " ".join(shlex.quote(str(DATA / r)) for r in relatives)
    return f"{when} || exit 2\n{cat}" if when else cat


def pci_function(root: Path, sysfs_path: str, ids: tuple[str, str, str] | None,
                 files: dict[str, str] | None = None) -> Path:
    """A PCI function as sysfs shows it: its folder under /sys/devices (sysfs_path as `readlink -f
    /sys/bus/pci/devices/BDF` prints it), a config file, its ids (vendor, device, class; None:
    not captured), more files, and the link."""
    folder = root / sysfs_path.lstrip("/")
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config").write_bytes(b"")
    for name, value in zip(("vendor", "device", "class"), ids or (), strict=False):
        (folder / name).write_text(f"0x{value}\n")
    for name, value in (files or {}).items():
        (folder / name).write_text(value + "\n")
    links = root / "sys/bus/pci/devices"
    links.mkdir(parents=True, exist_ok=True)
    (links / folder.name).symlink_to(Path("../../..") / sysfs_path.lstrip("/").removeprefix("sys/"))
    return folder


def acs_words(relative: str) -> dict[str, str]:
    """{BDF: ACS Control word as setpci prints it} of the bridges in an lspci capture, from the
    ACSCtl flags lspci decoded (gpunode.facts.pcie's parser)."""
    return {d.bdf: f"{sum(ACS_BITS[name] for name, on in d.acs_ctl.items() if on):04x}"
            for d in parse_lspci_vvv(read(relative)) if d.acs_ctl is not None}


def setpci_acs(words: dict[str, str]) -> str:
    """A setpci stand-in that reads ACS Control of the given bridges; everything else (and
    every write) fails: the script never writes."""
    cases = "".join(f"    {bdf}/ECAP_ACS+0x6.w) echo {word} ;;\n" for bdf, word in words.items())
    return f'[ "$1" = -s ] || exit 2\ncase "$2/$3" in\n{cases}    *) exit 1 ;;\nesac'


def run_verify(script: str, root: Path, path: str) -> subprocess.CompletedProcess:
    file = root.parent / "gpunode-verify"
    file.write_text(script)
    return subprocess.run(["/bin/sh", str(file)], env={"PATH": path,
                                                       "GPUNODE_VERIFY_ROOT": str(root)},
                          capture_output=True, text=True, timeout=60)


def samples(text: str) -> dict[tuple[str, str], float]:
    """{(metric, its setting/gpu/severity label or ""): value}, read with prometheus_client."""
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = sample.labels
            key = labels.get("setting") or labels.get("gpu") or labels.get("severity") or ""
            out[(sample.name, key)] = sample.value
    return out
