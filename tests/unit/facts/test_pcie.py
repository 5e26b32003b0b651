"""parse_lspci_vvv() and matches() on real lspci captures (tests/data/pcie)."""

import pytest

from gpunode.facts.pcie import (
    PcieDevice,
    PcieDevices,
    matches,
    normalize_bdf,
    parse_lspci_vvv,
)

from ._data import read


def by_bdf(devices: list[PcieDevice]) -> dict[str, PcieDevice]:
    return {d.bdf: d for d in devices}


def test_rtx3090_server_gpu_and_a_root_port():
    devices = by_bdf(parse_lspci_vvv(read("pcie/lspci_vvnn_g482z54_rtx3090.txt")))
    assert list(devices) == ["0000:40:08.0", "0000:40:08.1", "0000:41:00.0", "0000:41:00.1"]

    gpu = devices["0000:41:00.0"]
    assert (gpu.vendor_id, gpu.device_id, gpu.class_id) == ("10de", "2204", "0300")
    assert gpu.name == "NVIDIA Corporation GA102 [GeForce RTX 3090]"
    assert gpu.class_name == "VGA compatible controller"
    assert gpu.has_pcie_cap
    assert gpu.devcap_max_payload == 256
    assert gpu.devctl_max_payload == 256
    assert gpu.devctl_max_read_req == 512
    assert (gpu.lnkcap_speed, gpu.lnkcap_width) == ("16GT/s", 16)
    assert (gpu.lnksta_speed, gpu.lnksta_width) == ("16GT/s", 16)
    assert not gpu.lnksta_downgraded
    assert gpu.driver == "nvidia"
    assert gpu.numa_node == 1
    # "Resizable BAR <?>": lspci could not decode it, so no sizes.
    assert gpu.resizable_bar is None
    assert gpu.acs_ctl is None

    port = devices["0000:40:08.1"]
    assert port.class_id == "0604"
    assert port.devcap_max_payload == 512
    # A root port of the same root complex (secondary bus 43, not the GPU's bus 41):
    # it runs MPS 128 although it could do 512.
    assert port.devctl_max_payload == 128
    assert port.devctl_max_read_req == 512
    assert port.driver == "pcieport"
    assert port.acs_ctl == {
        "SrcValid": True,
        "TransBlk": False,
        "ReqRedir": False,
        "CmpltRedir": False,
        "UpstreamFwd": False,
        "EgressCtrl": False,
        "DirectTrans": False,
    }

    audio = devices["0000:41:00.1"]
    assert (audio.class_id, audio.driver) == ("0403", "snd_hda_intel")


def test_device_without_pcie_capability():
    host = parse_lspci_vvv(read("pcie/lspci_vvnn_g482z54_rtx3090.txt"))[0]
    assert host.bdf == "0000:40:08.0"
    assert host.class_id == "0600"
    assert not host.has_pcie_cap
    assert host.devctl_max_read_req is None
    assert host.lnkcap_speed is None and host.lnksta_width is None
    assert host.driver is None
    assert not host.caps_access_denied


def test_pve_root_port_downgraded_link_and_acs():
    devices = by_bdf(parse_lspci_vvv(read("pcie/lspci_vvnn_romed8_2t_pve5.13_rootport.txt")))
    assert len(devices) == 4
    port = devices["0000:00:03.1"]
    assert (port.lnkcap_speed, port.lnkcap_width) == ("16GT/s", 4)
    assert (port.lnksta_speed, port.lnksta_width) == ("8GT/s", 4)
    assert port.lnksta_downgraded
    assert port.devctl_max_payload == 256 and port.devctl_max_read_req == 512
    assert port.iommu_group == 62
    assert port.acs_ctl is not None
    assert port.acs_ctl["ReqRedir"] and port.acs_ctl["CmpltRedir"] and port.acs_ctl["UpstreamFwd"]
    assert not port.acs_ctl["DirectTrans"]
    iommu = devices["0000:00:00.2"]
    assert iommu.class_id == "0806" and not iommu.has_pcie_cap
    assert devices["0000:00:01.0"].iommu_group == 59


def test_space_indented_output_without_nn_and_idle_downgrade():
    (gpu,) = parse_lspci_vvv(read("pcie/lspci_vvv_esc8000a_rtx6000ada.txt"))
    assert gpu.bdf == "0000:01:00.0"  # no -D: domain 0000 assumed
    assert (gpu.vendor_id, gpu.device_id, gpu.class_id) == ("", "", "")  # no -nn
    assert gpu.name == "NVIDIA Corporation AD102GL [RTX 6000 Ada Generation]"
    assert gpu.devctl_max_read_req == 512
    # Idle Ada GPU: link trained down to 2.5GT/s, width x16 without annotation.
    assert (gpu.lnksta_speed, gpu.lnksta_width) == ("2.5GT/s", 16)
    assert gpu.lnksta_downgraded
    assert gpu.resizable_bar == ["16MB", "64GB", "32MB"]
    assert gpu.driver == "nvidia"
    assert not matches(gpu, "10de", None, [])  # vendor unknown without -nn


def test_a100_excerpt_ends_inside_express_capability():
    (gpu,) = parse_lspci_vvv(read("pcie/lspci_vvvnn_a100_sxm4_partial.txt"))
    assert gpu.bdf == "0000:da:00.0"
    assert (gpu.vendor_id, gpu.device_id, gpu.class_id) == ("10de", "20b0", "0302")
    assert gpu.name == "NVIDIA Corporation GA100 [A100 SXM4 40GB]"
    assert (gpu.devcap_max_payload, gpu.devctl_max_payload, gpu.devctl_max_read_req) == (
        256,
        256,
        512,
    )
    assert gpu.lnkcap_speed is None and gpu.driver is None
    assert gpu.numa_node == 5


@pytest.mark.parametrize(
    ("relative", "bdf", "driver", "vendor"),
    [
        ("pcie/lspci_vvv_nonroot_h100.txt", "0000:3b:00.0", "nvidia", ""),
        ("pcie/lspci_vnn_nonroot_realtek.txt", "0000:22:00.0", "r8169", "10ec"),
    ],
)
def test_access_denied_keeps_identity_and_driver(relative, bdf, driver, vendor):
    (dev,) = parse_lspci_vvv(read(relative))
    assert dev.bdf == bdf
    assert dev.driver == driver
    assert dev.vendor_id == vendor
    assert dev.caps_access_denied
    assert not dev.has_pcie_cap
    assert dev.devctl_max_read_req is None


def test_no_gpu_vm():
    devices = parse_lspci_vvv(read("pcie/lspci_vvvnnD_firecracker_vm_nogpu.txt"))
    assert [d.bdf for d in devices] == [f"0000:00:0{i}.0" for i in range(6)]
    assert devices[1].class_id == "ffff"  # "Unassigned class [ffff]"
    assert devices[1].name == "Red Hat, Inc. Virtio 1.0 memory balloon"
    assert not any(d.has_pcie_cap for d in devices)
    assert not [d for d in devices if matches(d, "10de", None, ["03"])]


@pytest.mark.parametrize("text", ["", "\n\n", "lspci: Unable to load libkmod resources: error -2"])
def test_empty_and_garbage(text):
    assert parse_lspci_vvv(text) == []


def test_matches_vendor_device_and_class():
    devices = parse_lspci_vvv(read("pcie/lspci_vvnn_g482z54_rtx3090.txt"))
    gpu = devices[2]
    assert matches(gpu, "10de", None, ["03"])
    assert matches(gpu, "10DE", "2204", ["0300", "0302"])
    assert matches(gpu, None, None, [])
    assert not matches(gpu, "10de", None, ["0302"])
    assert not matches(gpu, "10de", "2230", [])
    assert not matches(gpu, "1002", None, ["03"])
    nvidia_display = [d.bdf for d in devices if matches(d, "10de", None, ["03"])]
    assert nvidia_display == ["0000:41:00.0"]  # not the HDMI audio function
    assert [d.bdf for d in devices if matches(d, "10de", None, [])] == [
        "0000:41:00.0",
        "0000:41:00.1",
    ]
    # A three-digit entry is not a prefix: only exact 4-digit ids or 2-digit base classes.
    assert not matches(gpu, None, None, ["030"])


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("41:00.0", "0000:41:00.0"),
        ("0000:41:00.0", "0000:41:00.0"),
        ("00000000:01:00.0", "0000:01:00.0"),
        ("00000000:AF:00.0", "0000:af:00.0"),
        ("0001:C1:00.1", "0001:c1:00.1"),
    ],
)
def test_normalize_bdf(raw, expected):
    assert normalize_bdf(raw) == expected


def test_fact_command_and_process():
    fact = PcieDevices()
    assert fact.command() == "lspci -vvv -nn -D"
    assert fact.requires_command() == "lspci"
    assert fact.default() == []
    lines = read("pcie/lspci_vvnn_g482z54_rtx3090.txt").splitlines()
    assert [d.bdf for d in fact.process(lines)][2] == "0000:41:00.0"


def test_unreadable_block_is_kept_with_its_bdf_and_never_selected():
    """A function whose config space reads all ones ('!!! Unknown header type 7f'): kept in
    the list with its BDF and why, selected by no selector, reported by deploy and audit."""
    from gpunode.facts.pcie import is_nvidia_gpu, unreadable_note
    from gpunode.ops.pcie import selected_devices
    from gpunode.profile.node import PcieSelector
    from gpunode.roles.audit.pcie_checks import check_unreadable_pcie

    (dev,) = parse_lspci_vvv(read("pcie/lspci_vvvxnn_unknown_header_7f_navi10_bridge.txt"))
    assert dev.bdf == "0000:01:00.0"
    assert dev.unreadable == "lspci: Unknown header type 7f"
    assert (dev.vendor_id, dev.class_id, dev.driver) == ("1002", "0604", "pcieport")
    any_bridge = PcieSelector(vendor="1002", classes=["06"])
    assert selected_devices([dev], any_bridge) == []
    assert not is_nvidia_gpu(dev)
    assert unreadable_note([dev]) == ("lspci block(s) gpunode could not read, left alone: "
                                      "0000:01:00.0 (lspci: Unknown header type 7f)")

    class Snap:
        pcie = [dev]

    (check,) = check_unreadable_pcie(Snap())  # type: ignore[arg-type]
    assert check.name == "lspci 0000:01:00.0" and check.status == "P2"
    assert "Unknown header type 7f" in check.live


def test_a_block_the_parser_trips_on_is_reported_not_dropped(monkeypatch):
    import gpunode.facts.pcie as pcie

    text = read("pcie/lspci_vvnn_g482z54_rtx3090.txt")
    real = pcie._parse_body

    def trips(lines):
        if any("GA102" in line for line in lines) or not lines:
            return real(lines)
        raise ValueError("unexpected line")

    monkeypatch.setattr(pcie, "_parse_body", trips)
    devices = parse_lspci_vvv(text)
    bad = [d for d in devices if d.unreadable]
    assert bad and all(d.unreadable == "ValueError: unexpected line" for d in bad)
    assert len(devices) == len(pcie._split_blocks(text))
