"""p2pBandwidthLatencyTest and nccl-tests parsers on real outputs (tests/data/bandwidth)."""

import pytest

from gpunode.facts.bandwidth import (
    bandwidth_command,
    parse_bandwidth_results,
    parse_nccl_perf,
    parse_p2p_bandwidth,
    pcie_link_gbs,
)
from gpunode.facts.sections import MARKER

from ._data import read

P2P_OFF = "bandwidth/p2pBandwidthLatencyTest_8x4090_p2p_off.txt"
P2P_ON = "bandwidth/p2pBandwidthLatencyTest_8x4090_p2p_on.txt"
ALL_REDUCE = "bandwidth/all_reduce_perf_8x4090_p2p_off.txt"


def test_p2p_test_with_peer_access_disabled():
    p2p = parse_p2p_bandwidth(read(P2P_OFF))
    assert p2p.present and len(p2p.unidirectional_p2p) == 28
    assert not any(p2p.connectivity.values())
    assert p2p.unidirectional_p2p["0-1"] == 18.83  # min(18.83, 19.95)
    assert p2p.bidirectional_p2p["0-1"] == 20.86


def test_p2p_test_with_peer_access():
    p2p = parse_p2p_bandwidth(read(P2P_ON))
    assert all(p2p.connectivity.values()) and len(p2p.connectivity) == 28
    assert p2p.unidirectional_p2p["0-1"] == 25.6  # within one socket's half
    assert p2p.unidirectional_p2p["0-4"] == 21.36  # across
    assert p2p.unidirectional_no_p2p["0-1"] == 18.86
    assert p2p.bidirectional_p2p["0-1"] == 50.1


@pytest.mark.parametrize("text", ["", read(ALL_REDUCE), "Cuda failure p2pBandwidthLatencyTest.cu"])
def test_p2p_test_not_an_output(text):
    assert not parse_p2p_bandwidth(text).present


def test_all_reduce_perf():
    perf = parse_nccl_perf(read(ALL_REDUCE))
    assert perf.present and perf.gpus == 8
    assert (perf.avg_busbw, perf.peak_busbw, perf.peak_size) == (4.85265, 15.04, 33554432)
    assert perf.wrong == 0
    assert not parse_nccl_perf(read(P2P_ON)).present


def test_pcie_link_bandwidth_per_direction():
    assert pcie_link_gbs("16GT/s", 16) == 31.51
    assert pcie_link_gbs("32GT/s", 16) == 63.02
    assert pcie_link_gbs("8GT/s", 8) == 7.88
    assert pcie_link_gbs("5GT/s", 16) == 8.0
    assert pcie_link_gbs("2.5GT/s", 1) == 0.25
    assert pcie_link_gbs(None, 16) is None


def test_active_mode_output_sections():
    text = (f"{MARKER}gpus\n8\n{MARKER}p2p\ntool=/usr/local/bin/p2pBandwidthLatencyTest\n"
            f"{read(P2P_ON)}\n{MARKER}all_reduce\ntool=/opt/nccl-tests/build/all_reduce_perf\n"
            f"{read(ALL_REDUCE)}\n{MARKER}sendrecv\ntool=/opt/nccl-tests/build/sendrecv_perf\n"
            "Terminated\n\n")
    results = parse_bandwidth_results(text)
    assert results.ran == ["p2pBandwidthLatencyTest", "all_reduce_perf", "sendrecv_perf"]
    assert results.p2p.present and results.all_reduce.peak_busbw == 15.04
    assert results.errors == {"sendrecv_perf": "Terminated"}
    assert parse_bandwidth_results(f"{MARKER}gpus\n0\n{MARKER}p2p\n\n").ran == []


def test_active_mode_command_is_time_bound():
    command = bandwidth_command(90)
    assert command.count("timeout -k 5 90 ") == 3
    assert "-g \"$n\"" in command
