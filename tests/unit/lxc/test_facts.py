"""Fact parsers of the lxc_gpu role."""

import base64

from gpunode.facts.lxc import (
    LxcStartedConfig,
    NvidiaDevices,
    PctList,
    PveGuest,
    PveGuests,
    PveLxcConfigText,
    existing_guest_names,
    parse_pct_list,
    parse_pve_guests,
    parse_pve_lxc_config_fact,
    pve_lxc_config_command,
)
from gpunode.facts.nvidia_devices import DEVICE_FACT_SEPARATOR, NVIDIA_DEVICES_COMMAND
from tests.unit.lxc._data import read

PCT_LIST = """VMID       Status     Lock         Name
100        running                 pihole
101        stopped    backup       llm-b
110        running                 llm-a
"""


def test_pct_list():
    assert parse_pct_list(PCT_LIST) == {
        100: {"status": "running", "lock": "", "name": "pihole"},
        101: {"status": "stopped", "lock": "backup", "name": "llm-b"},
        110: {"status": "running", "lock": "", "name": "llm-a"},
    }
    assert PctList().process(PCT_LIST.splitlines())[110]["status"] == "running"
    assert parse_pct_list("") == {}


def test_config_fact_keeps_exact_bytes():
    text = read("pupman-idmap-snapshot-100.conf")  # no final newline
    wire = base64.b64encode(text.encode()).decode() + "\n"
    assert parse_pve_lxc_config_fact(wire) == text
    assert PveLxcConfigText().process([wire.strip()]) == text
    assert parse_pve_lxc_config_fact("gpunode:missing\n") is None


def test_config_fact_command_quotes_the_path():
    assert pve_lxc_config_command(110) == (
        "if [ -f /etc/pve/lxc/110.conf ]; then base64 -w0 /etc/pve/lxc/110.conf; echo; "
        "else echo gpunode:missing; fi"
    )


def test_nvidia_devices_fact():
    output = (
        read("proc-devices-ocp-efa-nvswitch.txt")
        + DEVICE_FACT_SEPARATOR
        + "\n"
        + read("stat-dev-nvidia-8gpu-synthetic.txt")
    ).splitlines()
    fact = NvidiaDevices()
    assert fact.command() == NVIDIA_DEVICES_COMMAND
    data = fact.process(output)
    assert data["majors"]["nvidia-uvm"] == 510
    assert {"path": "/dev/nvidia7", "kind": "char", "major": 195, "minor": 7} in data["devices"]


def test_pct_list_needs_pct_and_keeps_an_empty_node_apart_from_no_proxmox():
    fact = PctList()
    assert fact.requires_command() == "pct"
    assert fact.command() == "echo gpunode:pct; pct list"
    # A node without containers still prints the marker: {} (Proxmox, no containers).
    assert fact.process(["gpunode:pct"]) == {}
    assert fact.process(["gpunode:pct", *PCT_LIST.splitlines()])[101]["lock"] == "backup"


GUESTS = """local=nodes/pve1
/etc/pve/nodes/pve1/lxc/100.conf|hostname: pihole
/etc/pve/nodes/pve1/lxc/110.conf|hostname: llm-a
/etc/pve/nodes/pve2/lxc/120.conf|hostname: llm-a
/etc/pve/nodes/pve1/qemu-server/200.conf|name: win11
/etc/pve/nodes/pve2/qemu-server/201.conf|
"""


def test_pve_guests_cluster_wide_with_names():
    parsed = parse_pve_guests(GUESTS)
    assert parsed["node"] == "pve1"
    assert parsed["guests"][201] == PveGuest(201, "vm", "pve2", "")
    assert existing_guest_names(parsed["node"], parsed["guests"]) == {
        100: "pihole",
        110: "llm-a",
        120: "llm-a (CT on node pve2)",
        200: "win11 (VM on node pve1)",
        201: "? (VM on node pve2)",
    }
    fact = PveGuests()
    assert fact.requires_command() == "pct"
    assert fact.process(GUESTS.splitlines())["guests"][110]["name"] == "llm-a"


def test_pve_guests_command_on_a_tree(tmp_path):
    """The real command, on a copy of the /etc/pve layout."""
    import subprocess

    from gpunode.facts.lxc import PVE_GUESTS_COMMAND

    root = tmp_path / "pve"
    (root / "nodes/pve1/lxc").mkdir(parents=True)
    (root / "nodes/pve2/qemu-server").mkdir(parents=True)
    (root / "nodes/pve1/lxc/110.conf").write_text(
        "#desc\narch: amd64\nhostname: llm-a\n\n[snap]\nhostname: old-name\n"
    )
    (root / "nodes/pve2/qemu-server/200.conf").write_text("cores: 2\nname: win11\n")
    (root / "local").symlink_to("nodes/pve1")
    command = PVE_GUESTS_COMMAND.replace("/etc/pve", str(root))
    out = subprocess.run(["sh", "-c", command], capture_output=True, text=True, check=True)
    parsed = parse_pve_guests(out.stdout.replace(str(root), "/etc/pve"))
    assert parsed == {
        "node": "pve1",
        "guests": {
            110: PveGuest(110, "ct", "pve1", "llm-a"),
            200: PveGuest(200, "vm", "pve2", "win11"),
        },
    }


def test_started_config_fact():
    text = "lxc.arch = amd64\nlxc.prlimit.memlock = unlimited\n"
    wire = base64.b64encode(text.encode()).decode()
    assert LxcStartedConfig().process([wire]) == text
    assert LxcStartedConfig().command(110) == (
        "if [ -f /var/lib/lxc/110/config ]; then base64 -w0 /var/lib/lxc/110/config; echo; "
        "else echo gpunode:missing; fi"
    )
