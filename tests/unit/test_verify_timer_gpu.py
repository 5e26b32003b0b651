"""The verify timer watches the GPUs too: the script (rendered from a profile, run by the real
/bin/sh against a copy of sysfs) reads persistence mode, power limits and ACS Control back, and
counts Xid events, pending remaps and downtrained links. Its tools are stand-ins that replay
captured outputs (tests/data, SOURCES.md): nvidia-smi -q -x, the kernel log, and ACS Control as
lspci decoded it in the lab guest. Plus the table of what the timer checks for which profile."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from gpunode.facts.cpu import CpuState
from gpunode.facts.gpu_details import IDLE_REASON_PATHS, REPAIR_PENDING_PATHS
from gpunode.facts.nvidia import POWER_LIMIT_PATHS, NvidiaGpu, parse_nvidia_smi_xml
from gpunode.facts.pcie import parse_lspci_vvv
from gpunode.ops.files import render_template
from gpunode.ops.nvidia import power_limit_targets
from gpunode.profile.metrics import GPU_HEALTH_GAUGES, METRIC_HELP
from gpunode.profile.node import NodeProfile
from gpunode.roles.verify_timer import (
    needs,
    render_script,
    script_variables,
    span_seconds,
    verify_checks,
)
from gpunode.roles.verify_timer.gpu import HEALTH_CHECKS
from tests.unit.verify_node import (
    acs_words,
    pci_function,
    read,
    replay,
    run_verify,
    samples,
    setpci_acs,
    tool_path,
)

RTX4070 = "nvidia/nvidia_smi_q_x_rtx4070_laptop_575.xml"  # Enabled, 95 W of 5..140, idle
L4 = "nvidia/nvidia_smi_q_x_l4_555_remapped_rows.xml"  # persistence mode Disabled
LAB_PATHS = "pcie/readlink_sys_bus_pci_devices_lab_qemu.txt"
LAB_LSPCI = "pcie/lspci_vvvnnD_lab_qemu_root_ports_acs_off.txt"
ACS_OFF = acs_words(LAB_LSPCI)
ACS_ON = {**ACS_OFF, **acs_words("pcie/lspci_vvvnnD_lab_qemu_root_port_acs_on.txt")}
R8169 = "kernel/r8169_unknown_chip_xid.txt"  # "r8169 0000:01:00.0: ... unknown chip XID 6c0"
GPU = "0000:01:00.0"  # the RTX 4070's address, in the lab guest's first root port
PORT = "0000:00:03.0"
GPU_IDS = ("10de", "2860", "030000")  # the capture's pci_device_id 286010DE, class 3, subclass 0
PERSISTENCE = ("gpu_persistence", "persistence mode", "Enabled", "")
ACS = ("acs", "ACS", "redirect off", "")


def gpus_of(relative: str) -> list[NvidiaGpu]:
    return parse_nvidia_smi_xml(read(relative)).gpus


def sysfs_lines(relative: str) -> dict[str, str]:
    """{FILE: VALUE} of `grep .` lines ("/sys/.../FILE:VALUE")."""
    pairs = (line.split(":", 1) for line in read(relative).splitlines())
    return {path.rsplit("/", 1)[1]: value for path, value in pairs}


def lab_node(root: Path, gpu: bool = True) -> None:
    """The lab guest's PCI tree (its `readlink -f` capture; ids from its lspci capture), an
    NVIDIA GPU in place of the stand-in below its first root port, its link files a link at
    its maximum (LACT #334's capture). gpu=False: the guest as captured, no GPU."""
    devices = {d.bdf: d for d in parse_lspci_vvv(read(LAB_LSPCI))}
    for path in read(LAB_PATHS).split():
        bdf = path.rsplit("/", 1)[1]
        if bdf == GPU and gpu:
            pci_function(root, path, GPU_IDS, sysfs_lines("pcie/sysfs_link_lact_334_full_x16.txt"))
        else:
            device = devices[bdf]
            pci_function(root, path, (device.vendor_id, device.device_id, device.class_id + "00"))


def gb10_node(root: Path) -> None:
    """The DGX Spark capture: NVIDIA GB10 000f:01:00.0 at 2.5 GT/s x1 of x16 below root port
    000f:00:00.0 (max 32 GT/s x16)."""
    files: dict[str, dict[str, str]] = {}
    ids: dict[str, str] = {}
    for line in read("pcie/sysfs_link_gb10_spark_downtrained.txt").splitlines():
        head, _, value = line.partition(": ")
        if head.startswith("path "):
            _, bdf, name = head.split()
            files.setdefault(bdf, {})[name] = value
        else:
            ids[head] = value.removeprefix("0x")
    port = "/sys/devices/pci000f:00/000f:00:00.0"
    pci_function(root, port, None, files["000f:00:00.0"])
    pci_function(root, f"{port}/000f:01:00.0", (ids["vendor"], ids["device"], ids["class"]),
                 files["000f:01:00.0"])


def run_node(tmp_path: Path, profile: NodeProfile, *, smi: str | Path | None = RTX4070,
             journal: tuple[str, ...] = (R8169,), acs: dict[str, str] | None = None,
             node=lab_node, deployed: str = RTX4070) -> dict:
    """Render the script for profile (the deploy saw `deployed`'s GPUs), run it on the node;
    {(metric, label): value}, stderr, the findings."""
    root = tmp_path / "root"
    node(root)
    (root / "proc").mkdir(exist_ok=True)
    checks = verify_checks(profile, CpuState(), [], None, gpus_of(deployed))
    (root / "proc/cmdline").write_text(" ".join(w for c, _, w, _ in checks if c == "cmdline"))
    stand_ins = {"systemctl": "echo infinity",
                 "setpci": setpci_acs(ACS_OFF if acs is None else acs),
                 "journalctl": replay(*journal, when='[ "$1 $2" = "-k -b" ]')}
    if smi is not None:
        stand_ins["nvidia-smi"] = replay(str(smi), when='[ "$*" = "-q -x" ]')
    path = tool_path(tmp_path / "bin", stand_ins)
    out = tmp_path / "prom" / "gpunode.prom"
    profile = profile.model_copy(update={"metrics_dir": str(out.parent)})
    run = run_verify(render_script(profile, CpuState(), [], None, gpus_of(deployed)), root, path)
    assert run.returncode == 0, run.stderr
    assert [p.name for p in out.parent.iterdir()] == ["gpunode.prom"]
    got = samples(out.read_text())
    findings = {sev: got[("gpunode_findings", sev)] for sev in ("P0", "P1", "P2", "limit")}
    return {"got": got, "stderr": run.stderr, "findings": findings, "stdout": run.stdout}


def gpu_samples(got: dict) -> dict:
    return {key: value for key, value in got.items() if key[0] in GPU_HEALTH_GAUGES}


def setting(name: str) -> tuple[str, str]:
    return ("gpunode_setting_ok", name)


ON = NodeProfile(verify_timer=True, pcie_acs_redirect="off", gpu_power_limit=95)


def test_a_healthy_node_reads_ok_and_finds_nothing(tmp_path):
    run = run_node(tmp_path, ON)
    got = run["got"]
    assert got[setting("GPU0 persistence mode")] == 1
    assert got[setting("GPU0 power limit")] == 1
    assert got[setting(f"ACS {PORT}")] == 1
    assert not [k for k in got if k[1].startswith("ACS 0000:00:0") and k[1] != f"ACS {PORT}"]
    # The r8169 line names 0000:01:00.0 too, and says "XID": not an NVIDIA Xid.
    assert gpu_samples(got) == {("gpunode_gpu_xid_events", GPU): 0,
                                ("gpunode_gpu_xid_critical", GPU): 0,
                                ("gpunode_gpu_remap_pending", GPU): 0,
                                ("gpunode_gpu_link_downtrained", GPU): 0}
    assert run["findings"] == {"P0": 0, "P1": 0, "P2": 0, "limit": 0}
    assert got[("gpunode_pending_reboot", "")] == 0
    assert run["stderr"] == ""
    assert "3 GPU health sample(s)" in run["stdout"]


def test_persistence_mode_off_drifts(tmp_path):
    run = run_node(tmp_path, NodeProfile(verify_timer=True), smi=L4)
    assert run["got"][setting("GPU0 persistence mode")] == 0
    assert run["findings"] == {"P0": 1, "P1": 0, "P2": 0, "limit": 0}
    assert "drifted: GPU0 persistence mode: Disabled, wants Enabled" in run["stderr"]


def test_a_power_limit_that_drifted(tmp_path):
    """'max' is the deploy's 140 W (power_limit_targets on its report); the GPU holds 95 W."""
    run = run_node(tmp_path, NodeProfile(verify_timer=True, gpu_power_limit="max"))
    assert run["got"][setting("GPU0 power limit")] == 0
    assert run["findings"]["P0"] == 1
    assert "drifted: GPU0 power limit: 95.00 W, wants 140 W" in run["stderr"]


def test_acs_redirect_set_again(tmp_path):
    run = run_node(tmp_path, ON, acs=ACS_ON)
    assert ACS_ON[PORT] == "001d"
    assert run["got"][setting(f"ACS {PORT}")] == 0
    assert run["findings"]["P0"] == 1
    assert f"drifted: ACS {PORT}: ACSCtl 001d, wants redirect off" in run["stderr"]


def test_xid_events_of_nvrm_lines_only(tmp_path):
    """Xid 79 on the GPU (critical: P0); the akash node's three GPUs: Xid 43 twice, 31, 94
    (application faults: P2 each); r8169's "XID" line on the same address counts nothing."""
    run = run_node(tmp_path, ON, journal=(R8169, "kernel/xid_journalctl_79_fallen_off_bus.txt",
                                          "kernel/xid_dmesg_T_akash_node4_535.txt"))
    xids = {k[1]: v for k, v in run["got"].items() if k[0] == "gpunode_gpu_xid_events"}
    assert xids == {GPU: 1, "0000:00:05.0": 2, "0000:00:07.0": 1, "0000:00:08.0": 1}
    critical = {k[1]: v for k, v in run["got"].items() if k[0] == "gpunode_gpu_xid_critical"}
    assert critical == {GPU: 1, "0000:00:05.0": 0, "0000:00:07.0": 0, "0000:00:08.0": 0}
    assert run["findings"] == {"P0": 1, "P1": 0, "P2": 3, "limit": 0}
    assert (f"GPU health: {GPU} Xid events: 1 since boot (Xid 79 x1), wants no Xid"
            in run["stderr"])
    assert "0000:00:05.0 Xid events: 2 since boot (Xid 43 x2)" in run["stderr"]


def test_a_pending_remap(tmp_path):
    """The RTX 4070's report with the one element a pending remap changes (no public capture
    shows `<remapped_row_pending>Yes` in XML)."""
    pending = tmp_path / "pending.xml"
    text = read(RTX4070)
    assert text.count("<remapped_row_pending>No<") == 1
    pending.write_text(text.replace("<remapped_row_pending>No<", "<remapped_row_pending>Yes<"))
    run = run_node(tmp_path, ON, smi=pending)
    assert run["got"][("gpunode_gpu_remap_pending", GPU)] == 1
    assert run["findings"] == {"P0": 1, "P1": 0, "P2": 0, "limit": 0}
    assert run["got"][("gpunode_pending_reboot", "")] == 1
    assert f"GPU0 {GPU} memory repair: a row remap or page retirement is pending" in run["stderr"]


def test_a_downtrained_link(tmp_path):
    """GB10 at x1 of x16 (GPU and port support x16): P1, from sysfs alone."""
    run = run_node(tmp_path, NodeProfile(verify_timer=True), smi=None, node=gb10_node)
    assert gpu_samples(run["got"]) == {("gpunode_gpu_link_downtrained", "000f:01:00.0"): 1}
    assert run["findings"] == {"P0": 0, "P1": 1, "P2": 0, "limit": 0}
    assert ("GPU health: 000f:01:00.0 PCIe link: 2.5 GT/s PCIe x1; both ends support Gen1 x16"
            in run["stderr"])


@pytest.mark.parametrize("gpu_in_sysfs", [True, False])
def test_without_nvidia_smi_the_gpu_reads_are_skipped(tmp_path, gpu_in_sysfs):
    """No nvidia-smi: no persistence, power limit, remap or Xid sample and nothing said; the
    link (sysfs) is still read where a GPU is there. Without the GPU: no GPU sample at all."""
    run = run_node(tmp_path, ON, smi=None, node=lambda root: lab_node(root, gpu_in_sysfs))
    got = run["got"]
    assert not [k for k in got if k[1].startswith("GPU")]
    link = {("gpunode_gpu_link_downtrained", GPU): 0} if gpu_in_sysfs else {}
    assert gpu_samples(got) == link
    assert got.get(setting(f"ACS {PORT}")) == (1 if gpu_in_sysfs else None)  # above a GPU only
    assert run["findings"] == {"P0": 0, "P1": 0, "P2": 0, "limit": 0}
    assert run["stderr"] == ""


# --- what the timer checks, for which profile -------------------------------------------------


@pytest.mark.parametrize(("profile", "deployed", "entries"), [
    (NodeProfile(gpu_persistence=False), None, []),
    (NodeProfile(), None, [PERSISTENCE]),
    (NodeProfile(gpu_power_limit=300), None, [PERSISTENCE]),  # the deploy saw no GPU
    (NodeProfile(gpu_power_limit="max", pcie_acs_redirect="off"), RTX4070,
     [PERSISTENCE, ("gpu_power_limit", "GPU0 power limit", "140", "0"), ACS]),
    (NodeProfile(gpu_persistence=False, gpu_power_limit={0: "default"}), RTX4070,
     [("gpu_power_limit", "GPU0 power limit", "55", "0")]),
    (NodeProfile(gpu_power_limit=250), "nvidia/nvidia_smi_q_x_tesla_p100_510.xml",
     [PERSISTENCE, ("gpu_power_limit", "GPU0 power limit", "250", "0")]),
], ids=["nothing set", "persistence", "no GPU seen", "max+ACS", "default", "P100 250 W"])
def test_the_gpu_entries_of_the_one_list(profile, deployed, entries):
    """The GPU settings the profile makes gpunode set, each GPU's power limit as the deploy
    resolves it, then the health checks every timer runs."""
    gpus = gpus_of(deployed) if deployed else []
    checks = verify_checks(profile, CpuState(), [], None, gpus)
    assert checks[-len(HEALTH_CHECKS):] == HEALTH_CHECKS
    assert [c for c in checks if c[0] in ("gpu_persistence", "gpu_power_limit", "acs")] == entries
    if profile.gpu_power_limit is not None and gpus:
        targets, _ = power_limit_targets(profile.gpu_power_limit, gpus)
        assert {int(c[3]): int(c[2]) for c in entries if c[0] == "gpu_power_limit"} == targets
    lines = render_script(profile, CpuState(), [], None, gpus).splitlines()
    for check, name, want, where in checks:  # each entry one call, every word quoted
        assert shlex.join([f"check_{check}", name, want, *([where] if where else [])]) in lines
    assert needs(profile.model_copy(update={"verify_timer": True})).nvidia == (
        profile.gpu_power_limit is not None)


def test_the_script_reads_with_gpunodes_rules():
    variables = script_variables(NodeProfile(), CpuState(), [], None)
    assert variables["gpu_patterns"] == ["10de:*:03??"]
    assert variables["pcie_gens"] == "2.5=1 5=2 8=3 16=4 32=5 64=6"
    assert set(variables["smi_paths"]) == {"persistence_mode", *POWER_LIMIT_PATHS,
                                           *REPAIR_PENDING_PATHS, *IDLE_REASON_PATHS}
    statuses = dict(e.split("=") for e in variables["xid_status"].split())
    assert (statuses["79"], statuses["13"], statuses["45"], variables["xid_other"]) == (
        "P0", "P2", "ok", "P2")
    assert (variables["acs_mask"], variables["acs_control"]) == ("0x003d", "ECAP_ACS+0x6.w")
    assert set(variables["gpu_gauges"]) <= set(METRIC_HELP)
    assert len(variables["xid_sed"].split("/")) == 4  # s/ERE/REPLACEMENT/p: no other slash


def test_a_hanging_nvidia_smi_is_given_up(tmp_path):
    """nvidia-smi waits minutes on a GPU that fell off the bus: after SMI_TIMEOUT_S (1 s here)
    the GPUs count as not reported, and the metrics are still written."""
    root = tmp_path / "root"
    lab_node(root)
    path = tool_path(tmp_path / "bin", {"nvidia-smi": "exec sleep 30", "systemctl": "true",
                                        "setpci": setpci_acs(ACS_OFF)})
    profile = NodeProfile(verify_timer=True, metrics_dir=str(tmp_path / "prom"))
    variables = {**script_variables(profile, CpuState(), [], None), "smi_timeout_s": 1}
    run = run_verify(render_template("verify/gpunode-verify.sh.j2", **variables), root, path)
    assert run.returncode == 0, run.stderr
    got = samples((tmp_path / "prom" / "gpunode.prom").read_text())
    assert gpu_samples(got) == {("gpunode_gpu_link_downtrained", GPU): 0}
    assert not [k for k in got if k[1].startswith("GPU")]


@pytest.mark.parametrize(("span", "seconds"), [("15min", 900), ("1h", 3600), ("30s", 30),
                                               ("2d", 172800)])
def test_the_timer_writes_its_interval_in_seconds(tmp_path, span, seconds):
    """gpunode_verify_interval_seconds: what the stale-check alert compares the last check's
    age with (gpunode/prometheus/gpunode-rules.yml)."""
    assert span_seconds(span) == seconds
    run = run_node(tmp_path, NodeProfile(verify_timer=True, verify_interval=span))
    assert run["got"][("gpunode_verify_interval_seconds", "")] == seconds
