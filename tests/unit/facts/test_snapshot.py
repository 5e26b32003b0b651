"""The snapshot's one read (gpunode.facts.node_read.NodeRead) run in a real shell.

The systemd part: a stand-in systemctl on PATH prints the lab guest's captured output
(tests/data/systemd/, systemd 257 on Debian 13), keeping only the properties it is asked for,
as systemctl does; the units' state from the one `systemctl show` is what pyinfra's own
SystemdStatus and SystemdEnabled read. The rest: this machine's real /proc, /sys and files.
The real systemctl and lspci are exercised by the lab tier's runs."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from unittest.mock import patch

from pyinfra.api import Config, FactBase, Inventory, State
from pyinfra.api.connect import connect_all
from pyinfra.api.host import Host
from pyinfra.context import ctx_host, ctx_state
from pyinfra.facts.systemd import SystemdEnabled, SystemdStatus

from gpunode.facts.node_read import MISSING_COMMAND, NodeRead, sections, split_sections
from gpunode.facts.owned import PENDING_DIR
from gpunode.facts.snapshot import (
    Needs,
    Part,
    Snapshot,
    node,
    node_changed,
    read_node,
)
from gpunode.facts.systemd import Unit

from ._data import read as read_capture

REAL_GET_FACT = Host.get_fact
DATA = Path(__file__).parents[2] / "data" / "systemd" / "show-units-trixie.txt"
UNITS = ["ssh.service", "nvidia-persistenced.service", "systemd-journald.service",
         "cron.timer", "apt-daily.timer"]

# Prints the captured blocks of the asked units with the asked properties only.
STAND_IN = """#!/bin/sh
echo "$*" >> "$CALLS"
props=; units=
while [ $# -gt 0 ]; do
  case "$1" in
    show|--all) ;;
    --property) shift; props="$props $1" ;;
    *) units="$units $1" ;;
  esac
  shift
done
awk -v props="$props" -v units="$units" '
  BEGIN { n = split(props, p, " "); for (i = 1; i <= n; i++) want[p[i]] = 1
          m = split(units, u, " "); for (i = 1; i <= m; i++) asked[u[i]] = 1 }
  /^Id=/ { unit = substr($0, 4); if (unit in asked) { if (printed++) print "" } }
  /=/ { key = substr($0, 1, index($0, "=") - 1); if ((unit in asked) && (key in want)) print }
' "$DATA"
"""


def run(tmp_path: Path, command: str) -> list[str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "systemctl").write_text(STAND_IN)
    (bin_dir / "systemctl").chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "DATA": str(DATA),
           "CALLS": str(tmp_path / "calls")}
    out = subprocess.run(["sh", "-c", command], capture_output=True, text=True, env=env,
                         check=True)
    return out.stdout.splitlines()


def own_value(tmp_path: Path, fact: type, units: list[str]) -> dict[str, bool]:
    instance = fact()
    return instance.process(run(tmp_path, str(instance.command(services=units).get_raw_value())))


def read(tmp_path: Path, needs: Needs) -> Snapshot:
    fact = NodeRead()
    lines = run(tmp_path, str(fact.command(needs=needs).get_raw_value()))
    return fact.process(lines)


def test_one_systemctl_gives_each_unit_what_pyinfra_reads_of_it(tmp_path):
    snapshot = read(tmp_path, Needs(units=tuple(UNITS)))
    calls = (tmp_path / "calls").read_text().splitlines()
    assert sum("--property Id" in call for call in calls) == 1  # one systemctl for all units
    active = own_value(tmp_path, SystemdStatus, UNITS)
    enabled = own_value(tmp_path, SystemdEnabled, UNITS)
    assert snapshot.units == {u: Unit(active=active[u], enabled=enabled[u]) for u in UNITS}
    assert snapshot.unit("ssh.service") == Unit(active=True, enabled=True)
    assert snapshot.unit("nvidia-persistenced.service") == Unit()
    assert snapshot.unit("not-asked.service") == Unit()


def test_one_read_holds_every_part_the_needs_name(tmp_path):
    target = tmp_path / "owned.conf"
    target.write_text("a = 1\n")
    folder = tmp_path / "folder"
    folder.mkdir()
    (folder / "x").write_text("")
    needs = Needs(sysctl_keys=("vm.swappiness",), files=(str(target), str(tmp_path / "none")),
                  contents=(str(target),), folders=(str(folder), str(tmp_path / "nope")),
                  parts=(Part(name="hostname", fact=HostnameFact),))
    snapshot = read(tmp_path, needs)
    live = Path("/proc/sys/vm/swappiness").read_text().strip()
    assert snapshot.kernel.sysctls == {"vm.swappiness": live}
    state = snapshot.file(str(target))
    assert state is not None and state.mode == "644"
    assert snapshot.file(str(tmp_path / "none")) is None
    assert snapshot.contents == {str(target): ["a = 1"]}
    assert snapshot.folders[str(folder)] == ["x"]
    assert not snapshot.folder_exists(str(tmp_path / "nope"))
    assert snapshot.parts == {"hostname": os.uname().nodename}
    assert snapshot.recorded is None and snapshot.nvidia is None  # not needed: not read


def test_parts_not_needed_are_not_in_the_command():
    plain = set(sections(Needs()))
    assert plain == {"cmdline", "cpu", "kernel", "pcie", "mrrs_refused", "pci_paths", "folders"}
    wide = set(sections(Needs(audit=True, record=True, holds=True, units=("a.service",))))
    assert {"audit", "nvidia", "nvidia_module", "running_kernel", "pve", "dpkg", "recorded",
            "units"} <= wide
    assert "boot_tool" not in wide  # proxmox-boot-tool status mounts the ESPs: pins only


def test_one_source_is_read_once_and_gives_every_field_taken_from_it():
    """One dpkg-query (packages, holds, kernels, headers, NVIDIA packages), one module read
    (the loaded driver, the audit's flavours), one systemctl (units, persistenced)."""
    needs = Needs(audit=True, kernels=True, holds=True, packages=("kmod",),
                  units=("gpunode-tune.service",))
    fact = NodeRead()  # pyinfra calls command() then process() on one instance
    command = fact.command(needs=needs).get_raw_value()
    assert command.count("dpkg-query -W") == 1 and command.count("systemctl show --all") == 1
    assert command.count("modinfo nvidia") == 1
    assert command.count("journalctl") == 1
    dpkg = [f"{status}\t{want}\t{name}\t{name}\t{version}\tamd64" for status, want, name, version
            in [("ii ", "install", "dpkg", "1.22.21"), ("ii ", "install", "kmod", "34.2-2"),
                ("hi ", "hold", "proxmox-kernel-6.8.12-6-pve-signed", "6.8.12-6"),
                ("ii ", "install", "proxmox-kernel-6.8.12-5-pve-signed", "6.8.12-5"),
                ("ii ", "install", "proxmox-headers-6.8.12-6-pve", "6.8.12-6"),
                ("ii ", "install", "nvidia-driver", "550.54.15-1"),
                ("ii ", "install", "libcuda1", "550.54.15-1")]]
    proc_version = read_capture("nvidia/proc_driver_nvidia_version_550.54.15.txt").splitlines()
    parts = {
        "dpkg": dpkg, "running_kernel": ["6.8.12-5-pve"],
        "boot_modules": ["kernel=6.8.12-6-pve", "build=6.8.12-6-pve",
                         "/lib/modules/6.8.12-6-pve/updates/dkms/nvidia.ko"],
        "nvidia_module": ["@@gpunode:proc_version", *proc_version, "",
                          "@@gpunode:modinfo", "license:        NVIDIA", ""],
        "units": ["Id=gpunode-tune.service", "SubState=exited", "UnitFileState=enabled",
                  "ActiveState=active", "", "Id=nvidia-persistenced.service", "SubState=running",
                  "UnitFileState=enabled", "ActiveState=active"],
        "audit": ["@@gpunode:persistenced", "installed=yes"],
    }
    lines = [line for name, body in parts.items()
             for line in (f"@@gpunode-read:begin:{name}", *body, "@@gpunode-read:end:0")]
    snapshot = fact.process(lines)
    assert snapshot.packages == {"kmod": "34.2-2"}
    assert snapshot.holds == ["proxmox-kernel-6.8.12-6-pve-signed"]
    assert snapshot.kernels is not None and (snapshot.kernels.running, snapshot.kernels.newest,
                                             snapshot.kernels.held_packages) == (
        "6.8.12-5-pve", "6.8.12-6-pve", ["proxmox-kernel-6.8.12-6-pve-signed"])
    assert snapshot.boot_modules is not None
    assert snapshot.boot_modules.headers == ["proxmox-headers-6.8.12-6-pve"]
    assert snapshot.boot_modules.kernels["6.8.12-6-pve"].build
    assert snapshot.driver_packages == {"nvidia-driver": "550.54.15-1", "libcuda1": "550.54.15-1"}
    assert (snapshot.driver_loaded, snapshot.driver_open) == ("550.54.15", False)
    assert snapshot.module_installed_flavour == "proprietary"
    assert snapshot.nvidia_module is None  # not asked for: read for the fields above only
    assert snapshot.unit("gpunode-tune.service").active
    assert snapshot.persistenced is not None
    assert (snapshot.persistenced.installed, snapshot.persistenced.active) == (True, "active")


def test_a_failed_or_missing_part_keeps_its_default():
    lines = ["@@gpunode-read:begin:holds", MISSING_COMMAND, "", "@@gpunode-read:end:0",
             "@@gpunode-read:begin:recorded", "garbage", "", "@@gpunode-read:end:1",
             "@@gpunode-read:begin:pcie", "unterminated"]
    assert split_sections(lines)["recorded"] == (1, ["garbage"])
    fact = NodeRead()
    fact.command(needs=Needs(holds=True, record=True))
    snapshot = fact.process(lines)
    assert snapshot.holds == [] and snapshot.recorded is None and snapshot.pcie == []


def test_needs_union_keeps_every_item_once():
    a = Needs(files=("/b", "/a"), units=("x.service",), audit=True)
    b = Needs(files=("/a", "/c"), holds=True, parts=(Part(name="p", fact=HostnameFact),))
    both = a | b
    assert both.files == ("/a", "/b", "/c") and both.units == ("x.service",)
    assert both.audit and both.holds and [p.name for p in both.parts] == ["p"]
    assert both | b == both


class HostnameFact(FactBase):
    def command(self) -> str:
        return "uname -n"

    def process(self, output: list[str]) -> str:
        return output[0]


def test_a_run_reads_once_and_again_only_when_wider_or_stale():
    """On a real pyinfra State for @local: the deploy's read serves every later read of the
    same or fewer needs; wider needs read once more (their union); node_changed() makes the
    next node() read again."""
    state = State(Inventory((["@local"], {})), Config())
    connect_all(state)
    local = state.inventory.get_host("@local")
    reads: list[Needs] = []

    def get_fact(self, cls, *args, **kwargs):
        reads.append(kwargs["needs"])
        return REAL_GET_FACT(self, cls, *args, **kwargs)

    wide = Needs(sysctl_keys=("vm.swappiness",), holds=True)
    with patch.object(Host, "get_fact", get_fact), ctx_state.use(state), ctx_host.use(local):
        first = read_node(wide)
        assert read_node(Needs(holds=True)) is first and node() is first
        assert len(reads) == 1
        read_node(Needs(files=("/etc/hostname",)))
        # files read with the folder of their follow-up markers (facts.owned PENDING_DIR)
        assert reads[-1] == wide | Needs(files=("/etc/hostname",), folders=(PENDING_DIR,))
        changed = node_changed()
        changed.function(state, local)
        assert node().file("/etc/hostname") is not None and len(reads) == 3
        assert node() is node() and len(reads) == 3
    assert len(reads) == 3
