"""Fact parsers of the lxc_gpu role."""

import base64

from roles.lxc_gpu.facts import (
    NvidiaDevices,
    PctList,
    PveLxcConfigText,
    parse_pct_list,
    parse_pve_lxc_config_fact,
    pve_lxc_config_command,
)
from roles.lxc_gpu.passthrough import DEVICE_FACT_SEPARATOR, NVIDIA_DEVICES_COMMAND
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
