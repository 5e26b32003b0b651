"""gpunode's shell library (templates/shell/gpunode-lib.sh.j2), run for real in sh and dash
against a copy of sysfs: it selects exactly the PCI functions Python's `matches()` selects and
gives each cpuidle state the depth `IdleState.depth` gives, so the boot script, the verify
script and the deploy cannot disagree; and the templates hold no rule of their own."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from gpunode.facts.cpu import IdleState
from gpunode.facts.pcie import PcieDevice, id_patterns, matches
from gpunode.ops.cpu import cstate_script_variables
from gpunode.ops.files import render_template
from gpunode.ops.pcie import mrrs_script_variables, pcie_script_variables
from gpunode.profile.node import MAX_READ_REQUEST_SIZES, PcieSelector

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
