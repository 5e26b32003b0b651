"""The MaxReadReq write command: masked bits only, and a device that vanished is refused."""

import subprocess

import pytest

from gpunode.ops.pcie import (
    MRRS_MASK,
    mrrs_bits,
    setpci_mrrs_argument,
    write_and_verify_command,
)
from gpunode.profile.node import MAX_READ_REQUEST_SIZES


@pytest.mark.parametrize("size", MAX_READ_REQUEST_SIZES)
def test_value_stays_inside_the_mask(size):
    bits = mrrs_bits(size)
    assert bits & ~MRRS_MASK == 0
    assert not bits & 0x8000  # bit 15 would start a Function Level Reset
    assert setpci_mrrs_argument(size).endswith(":7000")
    assert 128 << (bits >> 12) == size


def test_4096_is_5000_not_the_rhel_script_2048():
    assert setpci_mrrs_argument(4096) == "CAP_EXP+8.w=5000:7000"
    assert mrrs_bits(2048) == 0x4000


def test_bad_size_is_refused():
    with pytest.raises(ValueError, match="not a MaxReadReq size"):
        mrrs_bits(3000)


def test_vanished_device_fails_before_any_write():
    """Run the real command in a real shell for a BDF that does not exist here."""
    bdf = "0000:fe:1f.7"
    proc = subprocess.run(["sh", "-c", write_and_verify_command(bdf, 4096)],
                          capture_output=True, text=True)
    assert proc.returncode == 1
    assert proc.stderr.strip() == (f"gpunode: device {bdf} vanished before the MaxReadReq "
                                   "write; nothing written")
