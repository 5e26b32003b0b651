"""gpunode's shell library (templates/shell/gpunode-lib.sh.j2), run for real in sh and dash
against a copy of sysfs: it selects exactly the PCI functions Python's `matches()` selects,
gives each cpuidle state the depth `IdleState.depth` gives, finds the bridges above a device
as `bridges_above`, and reads nvidia-smi's report, GPU addresses, link speeds and Xid lines as
the audit's parsers read the same captures, so the boot script, the verify script and the
deploy cannot disagree; and the templates hold no rule of their own."""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

import pytest

from gpunode.facts.cpu import IdleState
from gpunode.facts.gpu_details import (
    CLOCK_REASON_ACTIVE,
    IDLE_REASON_PATHS,
    REPAIR_PENDING_PATHS,
    SMI_YES,
    parse_gpu_details,
)
from gpunode.facts.gpu_health import XID_MARKER, XID_SED, _xid_bdf, parse_xid_lines, sysfs_speed
from gpunode.facts.nvidia import PERSISTENCE_PATH, parse_nvidia_smi_xml
from gpunode.facts.pcie import (
    SPEED_GEN,
    PcieDevice,
    id_patterns,
    matches,
    parse_lspci_vvv,
    parse_pci_paths,
)
from gpunode.ops.cpu import cstate_script_variables
from gpunode.ops.files import render_template
from gpunode.ops.pcie import (
    acs_script_variables,
    bridges_above,
    mrrs_script_variables,
    pcie_script_variables,
)
from gpunode.profile.node import MAX_READ_REQUEST_SIZES, NodeProfile, PcieSelector
from gpunode.roles.host_tuning import boot_script_variables
from gpunode.roles.verify_timer.gpu import gpu_script_variables
from tests.unit.verify_node import DATA, pci_function, read, tool_path

TEMPLATES = Path(__file__).parents[2] / "gpunode" / "templates"
SHELLS = ["sh", "dash"]

# (BDF, vendor, device, sysfs class): GPUs, an NVIDIA audio function, a NIC, a bridge.
FUNCTIONS = [
    ("0000:01:00.0", "10de", "2330", "030200"),
    ("0000:41:00.0", "10de", "2204", "030000"),
    ("0000:41:00.1", "10de", "1aef", "040300"),
    ("0000:02:00.0", "8086", "10d3", "020000"),
    ("0000:00:01.1", "1022", "1453", "060400"),
]
SELECTORS = [
    PcieSelector(),
    PcieSelector(vendor="10de", classes=["03"]),
    PcieSelector(vendor="10de", device="2330", classes=["0302"]),
    PcieSelector(vendor="10de", classes=["0302", "04"]),
    PcieSelector(vendor="8086", device="10d3", classes=["0200"]),
    PcieSelector(vendor="1022", classes=["0604"]),
]


def library(**variables: object) -> str:
    return render_template("shell/gpunode-lib.sh.j2", **variables)


def run(shell: str, script: str, root: Path) -> str:
    proc = subprocess.run([shell, "-c", f"ROOT={root}\n{script}"], capture_output=True,
                          text=True, timeout=30, cwd=root)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def fake_sysfs(root: Path) -> None:
    for bdf, vendor, device, cls in FUNCTIONS:
        folder = root / "sys/bus/pci/devices" / bdf
        folder.mkdir(parents=True)
        for name, value in (("vendor", vendor), ("device", device), ("class", cls)):
            (folder / name).write_text(f"0x{value}\n")
    # A file named like a pattern: the patterns must never glob in the working directory.
    for name in ("10de:ffff:0302", "10de:ffff:0300"):
        (root / name).write_text("")


@pytest.mark.parametrize("shell", SHELLS)
@pytest.mark.parametrize("selector", SELECTORS, ids=lambda s: " ".join(
    id_patterns(s.vendor, s.device, s.classes)))
def test_the_shell_selects_what_python_selects(tmp_path, shell, selector):
    fake_sysfs(tmp_path)
    script = library(**pcie_script_variables(selector, 4096)) + "pcie_matched\n"
    shell_says = run(shell, script, tmp_path).split("\n")
    python_says = [
        f"{bdf} {vendor}:{device}"
        for bdf, vendor, device, cls in FUNCTIONS
        if matches(PcieDevice(bdf=bdf, vendor_id=vendor, device_id=device, class_id=cls[:4],
                              name=""),
                   selector.vendor, selector.device, selector.classes)
    ]
    assert python_says, "each selector here matches something"
    assert sorted(line for line in shell_says if line) == sorted(python_says)


@pytest.mark.parametrize("shell", SHELLS)
def test_the_shell_reads_maxreadreq_as_python_writes_it(tmp_path, shell):
    """Each size's Device Control word (other bits set too) reads back as that size, and
    only the wanted size is ok; a reserved code is named, never taken for a size."""
    for size in MAX_READ_REQUEST_SIZES:
        variables = mrrs_script_variables(size)
        words = [f"{int(variables['mrrs_want'], 16) | 0x0810:04x}", "2810", "7810"]
        script = library(**variables) + "".join(
            f'echo "$(mrrs_bytes {w}) $(mrrs_ok {w} && echo ok || echo no)"\n' for w in words)
        lines = run(shell, script, tmp_path).splitlines()
        assert lines[0] == f"{size} ok"
        assert lines[1] == ("512 ok" if size == 512 else "512 no")
        assert lines[2] == "reserved(7000) no"


IDLE_STATES = [("POLL", 0), ("C1", 2), ("C1E", 10), ("C6", 133), ("C10", 1000),
               ("haltpoll idle", 5), ("ATM", 50), ("C3_ACPI", 100)]


@pytest.mark.parametrize("shell", SHELLS)
def test_the_shell_gives_each_cstate_pythons_depth(tmp_path, shell):
    calls = []
    for index, (name, latency) in enumerate(IDLE_STATES):
        folder = tmp_path / f"state{index}"
        folder.mkdir()
        (folder / "name").write_text(name + "\n")
        (folder / "latency").write_text(f"{latency}\n")
        calls.append(f"cstate_depth {folder}\n")
    script = library(**cstate_script_variables()) + "".join(calls)
    depths = [int(line) for line in run(shell, script, tmp_path).split()]
    assert depths == [IdleState(cpu=0, index=i, name=n, latency_us=lat, disabled=False).depth
                      for i, (n, lat) in enumerate(IDLE_STATES)]


RULE_TEXT = [
    re.compile(r"\bawk\b"),  # the selector was an awk program
    re.compile(r"128 <<"),  # the MaxReadReq decoding
    re.compile(r"0x[0-9a-fA-F]{3,}"),  # a mask or a field value
    re.compile(r"index\(|substr\("),
]


@pytest.mark.parametrize("name", ["boot/gpunode-tune.sh.j2", "verify/gpunode-verify.sh.j2",
                                  "shell/mrrs-write.sh.j2", "shell/acs-write.sh.j2",
                                  "shell/gpunode-lib.sh.j2"])
def test_no_template_writes_a_rule_of_its_own(name):
    """Selector, masks and field values come from Python as data: none is spelt in a template."""
    text = (TEMPLATES / name).read_text()
    for rule in RULE_TEXT:
        assert not rule.search(text), f"{name}: {rule.pattern}"


# --- the GPU part: nvidia-smi's report, addresses, link speeds, Xid lines, ACS bridges ---------

GPU_VARIABLES = gpu_script_variables()
SMI_CAPTURES = sorted(p.relative_to(DATA).as_posix() for p in (DATA / "nvidia").glob("*.xml"))


def smi_lines(shell: str, relative: str, root: Path) -> list[list[str]]:
    script = library(**GPU_VARIABLES) + f"smi_read <{shlex.quote(str(DATA / relative))}\n"
    return [line.split(" ", 3) for line in run(shell, script, root).splitlines()]


def first_value(lines: list[list[str]], index: int, paths: list[str]) -> str | None:
    """The first of paths the shell read a value for on GPU index (smi_value's rule)."""
    values = {line[2]: line[3] for line in lines if int(line[0]) == index and len(line) == 4}
    return next((values[p] for p in paths if p in values), None)


@pytest.mark.parametrize("shell", SHELLS)
@pytest.mark.parametrize("relative",
                         [*SMI_CAPTURES, "nvidia/nvidia_smi_error_version_mismatch.txt"])
def test_the_shell_reads_nvidia_smi_as_python_does(tmp_path, shell, relative):
    """Each GPU's address, persistence mode, power limit in force, pending memory repair and
    idleness, as the audit's parsers read the same capture."""
    lines = smi_lines(shell, relative, tmp_path)
    report = parse_nvidia_smi_xml(read(relative))
    details = parse_gpu_details(read(relative))
    assert [(int(i), b) for i, b, what, *_ in lines if what == "gpu"] == [
        (g.index, g.pci_bdf) for g in report.gpus]
    for gpu in report.gpus:
        assert first_value(lines, gpu.index, [PERSISTENCE_PATH]) == gpu.persistence_mode
        power = first_value(lines, gpu.index, GPU_VARIABLES["smi_power_limit"])
        assert (float(power.split()[0]) if power else None) == gpu.power_limit_w
        detail = details[gpu.pci_bdf]
        repair = detail.remapped_rows or detail.retired_pages
        pending = [first_value(lines, gpu.index, [p]) for p in REPAIR_PENDING_PATHS]
        assert any(v is not None for v in pending) == (repair is not None)
        assert any((v or "").lower() == SMI_YES for v in pending) == bool(repair and repair.pending)
        idle = first_value(lines, gpu.index, list(IDLE_REASON_PATHS)) == CLOCK_REASON_ACTIVE
        assert idle == ("gpu_idle" in detail.active_clock_reasons)


ADDRESSES = ["00000000:01:00.0", "0000:3B:00.0", "000F:01:00.0", "0000:cb:00", "PCI:x",
             "00000001:41:00.1", "41:00.0"]


@pytest.mark.parametrize("shell", SHELLS)
def test_the_shell_names_a_gpu_as_python_does(tmp_path, shell):
    """nvidia-smi's ids and the Xid lines' addresses (no function) become one BDF."""
    script = library(**GPU_VARIABLES) + "".join(f"bdf_norm {shlex.quote(a)}\n"
                                                for a in ADDRESSES)
    assert run(shell, script, tmp_path).split() == [_xid_bdf(a) for a in ADDRESSES]


SPEEDS = ["2.5 GT/s PCIe", "5.0 GT/s PCIe", "8.0 GT/s PCIe", "16.0 GT/s PCIe", "32.0 GT/s PCIe",
          "64.0 GT/s PCIe", "8 GT/s", "Unknown"]


@pytest.mark.parametrize("shell", SHELLS)
def test_the_shell_gives_each_link_speed_pythons_generation(tmp_path, shell):
    script = library(**GPU_VARIABLES) + "".join(f'echo "[$(pcie_gen {shlex.quote(s)})]"\n'
                                                for s in SPEEDS)
    assert run(shell, script, tmp_path).split() == [
        f"[{SPEED_GEN.get(sysfs_speed(s) or '', '')}]" for s in SPEEDS]


KERNEL_LOGS = sorted(p.relative_to(DATA).as_posix() for p in (DATA / "kernel").glob("*.txt"))


@pytest.mark.parametrize("shell", SHELLS)
@pytest.mark.parametrize("relative", KERNEL_LOGS)
def test_the_shell_takes_the_xid_lines_python_takes(tmp_path, shell, relative):
    """XID_MARKER and XID_SED (grep -F, sed -E) against parse_xid_lines: the same GPUs and
    Xids; r8169's "unknown chip XID" line is none."""
    script = (f"grep -F -e {shlex.quote(XID_MARKER)} {shlex.quote(str(DATA / relative))} "
              f"| sed -n -E {shlex.quote(XID_SED)}\n")
    pairs = [line.split() for line in run(shell, script, tmp_path).splitlines()]
    events = parse_xid_lines(read(relative)).events
    assert [(_xid_bdf(a), int(x)) for a, x in pairs] == [(e.bdf, e.xid) for e in events]
    assert bool(events) == ("r8169" not in relative)


@pytest.mark.parametrize("shell", SHELLS)
def test_the_shell_finds_the_bridges_python_finds(tmp_path, shell):
    """acs_bridges over the lab guest's sysfs tree (its readlink capture) and the lab selector
    (the e1000e stand-ins): the root ports above them, as gpunode.ops.pcie.bridges_above."""
    lspci = read("pcie/lspci_vvvnnD_lab_qemu_root_ports_acs_off.txt")
    devices = parse_lspci_vvv(lspci)
    readlinks = read("pcie/readlink_sys_bus_pci_devices_lab_qemu.txt")
    by_bdf = {d.bdf: d for d in devices}
    for path in readlinks.split():
        device = by_bdf[path.rsplit("/", 1)[1]]
        pci_function(tmp_path, path, (device.vendor_id, device.device_id, device.class_id + "00"))
    selector = PcieSelector(vendor="8086", device="10d3", classes=["0200"])
    script = (library(**pcie_script_variables(selector, 4096), **acs_script_variables())
              + "pcie_matched | acs_bridges\n")
    python_says = [b.bdf for b in bridges_above(devices, parse_pci_paths(readlinks), selector)]
    assert run(shell, script, tmp_path).split() == python_says == ["0000:00:03.0", "0000:00:04.0"]


SETPCI_ACS = """[ "$1" = -s ] || exit 2
f="$STATE/$2"
case "$3" in
    ECAP_ACS+0x6.w) cat "$f" ;;
    ECAP_ACS+0x6.w=*) a=${3#*=}; v=0x${a%:*}; m=0x${a#*:}; old=0x$(cat "$f")
                      printf '%04x\\n' $(( (old & ~m) | (v & m) )) >"$f" ;;
    *) exit 1 ;;
esac"""


def test_the_boot_script_clears_acs_on_the_bridges_the_timer_reads(tmp_path):
    """The boot script's ACS part through the shared acs_bridges/acs_redirecting: the lab's two
    root ports above the stand-ins, set as Linux sets them with an IOMMU, end with redirect off
    (a setpci stand-in keeps each bridge's ACS Control word); the third port is never touched."""
    root = tmp_path / "root"
    lspci = parse_lspci_vvv(read("pcie/lspci_vvvnnD_lab_qemu_root_ports_acs_off.txt"))
    by_bdf = {d.bdf: d for d in lspci}
    for path in read("pcie/readlink_sys_bus_pci_devices_lab_qemu.txt").split():
        device = by_bdf[path.rsplit("/", 1)[1]]
        pci_function(root, path, (device.vendor_id, device.device_id, device.class_id + "00"))
    state = tmp_path / "acs"
    state.mkdir()
    for port in ("0000:00:03.0", "0000:00:04.0", "0000:00:05.0"):
        (state / port).write_text("001d\n")
    selector = PcieSelector(vendor="8086", device="10d3", classes=["0200"])
    profile = NodeProfile(pcie_acs_redirect="off", max_cstate=None, cpu_governor=None,
                          gpu_persistence=False, pcie_selector=selector)
    script = render_template("boot/gpunode-tune.sh.j2", **boot_script_variables(profile))
    assert "\nROOT=\n" in script  # the node's own /sys; here the copy
    script = script.replace("\nROOT=\n", f"\nROOT={shlex.quote(str(root))}\n")
    proc = subprocess.run(["/bin/sh", "-c", script], capture_output=True, text=True, timeout=30,
                          env={"PATH": tool_path(tmp_path / "bin", {"setpci": SETPCI_ACS}),
                               "STATE": str(state)})
    assert proc.returncode == 0, proc.stderr
    assert "0000:00:03.0: ACSCtl 001d -> 0000 (redirect off)" in proc.stdout
    assert {p.name: p.read_text().strip() for p in state.iterdir()} == {
        "0000:00:03.0": "0000", "0000:00:04.0": "0000", "0000:00:05.0": "001d"}
