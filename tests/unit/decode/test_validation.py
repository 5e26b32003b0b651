"""docs/decode.md's validation table: its ceilings are what decode_step gives today."""

from __future__ import annotations

import pytest

from gpunode.decode.gpus import lookup_gpu
from gpunode.decode.shape import shape_from_config
from gpunode.decode.step import DecodeInputs, decode_step

LLAMA2_7B = dict(num_hidden_layers=32, hidden_size=4096, num_attention_heads=32,
                 num_key_value_heads=32, intermediate_size=11008, vocab_size=32000)
LLAMA2_70B = dict(num_hidden_layers=80, hidden_size=8192, num_attention_heads=64,
                  num_key_value_heads=8, intermediate_size=28672, vocab_size=32000)


@pytest.mark.parametrize(("config", "per_weight", "tp", "gpu", "ceiling"), [
    (LLAMA2_7B, 2, 1, "NVIDIA A100-SXM4-80GB", 153.5),
    (LLAMA2_70B, 1, 1, "NVIDIA A100-SXM4-80GB", 29.7),
    (LLAMA2_70B, 2, 8, "NVIDIA A100-SXM4-80GB", 81.5),
    (LLAMA2_7B, 0.5625, 1, "NVIDIA GeForce RTX 4090", 266.4),
])
def test_docs_table_ceilings(config, per_weight, tp, gpu, ceiling):
    result = decode_step(DecodeInputs(
        shape=shape_from_config(config), gpu=lookup_gpu(gpu), gpu_count=tp, tp=tp,
        weight_bytes_per_param=per_weight, context=128, link="NV12" if tp > 1 else None))
    assert result.ceiling_tokens_per_s == pytest.approx(ceiling, abs=0.1)
