"""The GPU table (gpunode/decode/gpus.yaml) matched by the names nvidia-smi prints."""

from __future__ import annotations

import pytest

from gpunode.decode.gpus import gpu_table, lookup_gpu

# The name nvidia-smi --query-gpu=name prints -> (table row, memory bandwidth GB/s).
NAMES = {
    "NVIDIA H100 80GB HBM3": ("NVIDIA H100 SXM5 80GB", 3350),
    "NVIDIA H100 PCIe": ("NVIDIA H100 PCIe 80GB", 2000),
    "NVIDIA H100 NVL": ("NVIDIA H100 NVL 94GB", 3900),
    "NVIDIA H200": ("NVIDIA H200 SXM 141GB", 4800),
    "NVIDIA H200 NVL": ("NVIDIA H200 NVL 141GB", 4800),
    "NVIDIA H20": ("NVIDIA H20 96GB", 4000),
    "NVIDIA B200": ("NVIDIA B200 180GB", 8000),
    "NVIDIA RTX PRO 6000 Blackwell Workstation Edition":
        ("NVIDIA RTX PRO 6000 Blackwell Workstation Edition", 1792),
    "NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition":
        ("NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition", 1792),
    "NVIDIA RTX PRO 6000 Blackwell Server Edition":
        ("NVIDIA RTX PRO 6000 Blackwell Server Edition", 1597),
    "NVIDIA GeForce RTX 5090": ("NVIDIA GeForce RTX 5090", 1792),
    "NVIDIA A100-SXM4-40GB": ("NVIDIA A100 SXM4 40GB", 1555),
    "NVIDIA A100-SXM4-80GB": ("NVIDIA A100 SXM4 80GB", 2039),
    "NVIDIA A100-PCIE-40GB": ("NVIDIA A100 PCIe 40GB", 1555),
    "NVIDIA A100 80GB PCIe": ("NVIDIA A100 PCIe 80GB", 1935),
    "NVIDIA A10": ("NVIDIA A10 24GB", 600),
    "NVIDIA A30": ("NVIDIA A30 24GB", 933),
    "NVIDIA A40": ("NVIDIA A40 48GB", 696),
    "NVIDIA RTX A6000": ("NVIDIA RTX A6000 48GB", 768),
    "NVIDIA GeForce RTX 3090": ("NVIDIA GeForce RTX 3090 24GB", 936),
    "NVIDIA L40": ("NVIDIA L40 48GB", 864),
    "NVIDIA L40S": ("NVIDIA L40S 48GB", 864),
    "NVIDIA L4": ("NVIDIA L4 24GB", 300),
    "NVIDIA RTX 6000 Ada Generation": ("NVIDIA RTX 6000 Ada Generation 48GB", 960),
    "NVIDIA GeForce RTX 4090": ("NVIDIA GeForce RTX 4090 24GB", 1008),
    "Tesla T4": ("NVIDIA Tesla T4 16GB", 320),
}


@pytest.mark.parametrize("smi_name", sorted(NAMES))
def test_each_smi_name_finds_its_row(smi_name):
    spec = lookup_gpu(smi_name)
    assert spec is not None
    assert (spec.name, spec.memory_bandwidth_gb_s) == NAMES[smi_name]


def test_table_covers_25_gpus_each_with_a_source():
    rows = gpu_table()
    assert len(rows) >= 25
    assert len({r.name for r in rows}) == len(rows)
    assert all(r.source.startswith("https://") for r in rows)


def test_blanks_and_case_do_not_matter_and_unknown_is_none():
    assert lookup_gpu("  nvidia   h100 NVL ").name == "NVIDIA H100 NVL 94GB"
    assert lookup_gpu("NVIDIA A10G") is None
    assert lookup_gpu("") is None
