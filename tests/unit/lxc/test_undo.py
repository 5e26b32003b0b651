"""Undo of a container's GPU lines on the real captured configs (tests/data/lxc/SOURCES.md):
apply (the take-over) and record, then undo removes exactly the lines gpunode added: every
other line stays byte for byte (the user's mounts, devN keys, comments, [pve:pending] and
snapshot sections); where gpunode only added, the config is the original again; a second
undo changes nothing; the recorded lines are found again after Proxmox re-renders them."""

from __future__ import annotations

from collections import Counter

import pytest

from gpunode.facts import pve_config as pc
from gpunode.roles.lxc_gpu.plan import new_container_lines
from gpunode.roles.lxc_gpu.record import (
    LxcGpuRecords,
    LxcLinesRecord,
    recorded_after,
    without_added,
)
from tests.unit.lxc._data import ALL_CONFIGS, read
from tests.unit.lxc.test_takeover import MAJORS, NODES, STYLES, converge, spec


def apply(text: str, s, version: str, record: LxcLinesRecord | None = None):
    out = pc.render(converge(text, s, version).config)
    return out, recorded_after(record, text, out)


@pytest.mark.parametrize("name", ALL_CONFIGS)
@pytest.mark.parametrize("gpus", ["all", [0]])
@pytest.mark.parametrize("style", STYLES)
def test_undo_removes_exactly_the_lines_gpunode_added(name, gpus, style):
    text = read(name)
    applied, record = apply(text, spec(gpus=gpus, gpu_passthrough=style[0]), style[1])
    undone, taken = without_added(applied, record)

    assert Counter(taken) == Counter(record.added)
    before, after = pc.parse_pve_lxc_config(applied), pc.parse_pve_lxc_config(undone)
    assert before.sections[1:] == after.sections[1:]  # pending and snapshots untouched
    # Every line of the original gpunode did not remove is there again, in order.
    kept = Counter(ln.raw for ln in pc.parse_pve_lxc_config(text).main.lines)
    kept -= Counter(record.removed)
    assert Counter(ln.raw for ln in after.main.lines) == kept
    if not record.removed:
        assert undone == text  # only added: byte-identical original
    # A second undo (the record is gone: nothing to take out) changes nothing.
    assert without_added(undone, LxcLinesRecord()) == (undone, [])


def test_what_gpunode_removed_is_recorded_not_its_own_lines():
    """unsloth-studio: the user's `c 195:* rwm` (would open every GPU) is removed at apply:
    recorded as the user's, the three lines gpunode adds as its own."""
    text = read("unsloth-studio-devN.conf")
    applied, record = apply(text, spec(gpus=[0]), "8.2.4")
    assert record.removed == ["lxc.cgroup2.devices.allow: c 195:* rwm"]
    assert record.added == [  # in file order
        "lxc.cgroup2.devices.allow: c 235:* rwm",
        "lxc.mount.entry: /dev/nvidia-caps dev/nvidia-caps none bind,optional,create=dir",
        "lxc.prlimit.memlock: unlimited",
    ]
    undone, _ = without_added(applied, record)
    assert "dev0: /dev/nvidia0,gid=104" in undone  # the user's devN keys stay
    assert "lxc.cgroup2.devices.allow: c 195:* rwm" not in undone


def test_a_later_apply_keeps_the_record_of_its_own_lines():
    """GPUs [0, 1] then [0]: gpunode's line for GPU 1 leaves the record, not the user's."""
    text = read("pve-container-rollback-105.conf")
    first, record = apply(text, spec(gpus=[0, 1]), "8.1.10")
    second, record = apply(first, spec(gpus=[0]), "8.1.10", record)
    assert not any("nvidia1" in raw or "195:1 " in raw for raw in record.added)
    assert not any("nvidia1" in raw for raw in record.removed)
    assert without_added(second, record)[0] == text


def test_a_created_container_loses_only_the_appended_lines():
    """pct create's own lines stay; the lines gpunode appended go (a new config: the main
    section of a real one)."""
    created = read("pve-container-delete-106.conf").split("\n\n")[0] + "\n"
    lines = new_container_lines(spec(gpus=[0]), MAJORS, NODES, pve_version="8.1.10")
    record = recorded_after(None, "", "\n".join(lines))
    assert record.added == lines and record.removed == []
    applied = created + "".join(f"{line}\n" for line in lines)
    assert without_added(applied, record) == (created, lines)


def test_lines_re_rendered_by_proxmox_are_still_found():
    """`lxc.prlimit.memlock = unlimited` (the lxc.conf spelling) is the recorded line."""
    record = LxcLinesRecord(added=["lxc.prlimit.memlock: unlimited"])
    text = "arch: amd64\nlxc.prlimit.memlock = unlimited\nlxc.idmap: u 0 100000 65536\n"
    assert without_added(text, record) == ("arch: amd64\nlxc.idmap: u 0 100000 65536\n",
                                            ["lxc.prlimit.memlock = unlimited"])


def test_records_fact_reads_each_container():
    fact = LxcGpuRecords()
    good = "eyJhZGRlZCI6IFsiZGV2MDogL2Rldi9udmlkaWEwIl0sICJyZW1vdmVkIjogW119"
    records = fact.process([f"110.json\t{good}", "bad.json\t!!", "111.json\tnotbase64?"])
    assert records == {110: {"added": ["dev0: /dev/nvidia0"], "removed": []}}
