"""The decode step's terms on hand-checked cases (gpunode.decode.step)."""

from __future__ import annotations

import pytest

from gpunode.decode.gguf import parse_gguf_header
from gpunode.decode.gpus import gpu_table, lookup_gpu
from gpunode.decode.shape import DecodeInputError, shape_from_config
from gpunode.decode.step import DecodeInputs, decode_json, decode_step, step_bar, what_if

# Llama-3.1-8B's config.json values (https://huggingface.co/meta-llama/Llama-3.1-8B).
LLAMA_8B = {"architectures": ["LlamaForCausalLM"], "num_hidden_layers": 32, "hidden_size": 4096,
            "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336,
            "vocab_size": 128256, "tie_word_embeddings": False, "torch_dtype": "bfloat16"}


def test_llama_8b_params_within_2_percent_of_the_card():
    """Card: 8.03B. Attention 4096*(4096+2*1024+4096) = 41.9M, MLP 3*4096*14336 = 176.2M,
    norms 8192: 218.1M a layer x 32 = 6.98B; embedding + head 2*128256*4096 = 1.05B: 8.03B."""
    assert shape_from_config(LLAMA_8B).total_params() == pytest.approx(8.03e9, rel=0.02)


def test_weights_and_kv_terms_hand_checked():
    """Read params = 8.03B - embedding 0.525B = 7.505B; x 2 bytes = 15.01 GB / 3350 GB/s =
    4.481 ms. KV: 32 layers x 2 x 8 heads x 128 x 2 bytes = 131072 B a token; x 1024 tokens =
    134.2 MB / 3350 GB/s = 0.0401 ms. Comm 0 (TP 1), launch 0 (graphs): ceiling 221.2 tok/s."""
    gpu = lookup_gpu("NVIDIA H100 80GB HBM3")
    inputs = DecodeInputs(shape=shape_from_config(LLAMA_8B), gpu=gpu, gpu_count=1,
                          weight_bytes_per_param=2, context=1024)
    result = decode_step(inputs)
    assert result.terms_ms["weights"] == pytest.approx(4.481, abs=0.002)
    assert result.terms_ms["kv"] == pytest.approx(0.0401, abs=0.0002)
    assert result.terms_ms["comm"] == 0 and result.terms_ms["launch"] == 0
    assert result.ceiling_tokens_per_s == pytest.approx(221.2, abs=0.2)
    assert result.binding == "weights"
    assert "<- binds" in step_bar(result)
    eager = what_if(inputs, eager=True)
    # 32 layers x 12 kernels + 4 = 388 kernels x 5 us = 1.94 ms.
    assert eager.terms_ms["launch"] == pytest.approx(1.94)
    comm = what_if(inputs, tp=2, gpu_count=2, allreduce_us=20.0)
    # 2 all-reduces x 32 layers x 20 us = 1.28 ms; weights halve to 2.2405 ms.
    assert comm.terms_ms["comm"] == pytest.approx(1.28)
    assert comm.terms_ms["weights"] == pytest.approx(4.481 / 2, abs=0.001)
    assert decode_json(result, 150.0)["efficiency"] == pytest.approx(150 / 221.2, abs=0.001)


def test_missing_inputs_give_no_ceiling_and_say_how():
    result = decode_step(DecodeInputs(shape=shape_from_config(LLAMA_8B), gpu=None, tp=4,
                                      gpu_count=2, weight_bytes_per_param=2))
    assert result.ceiling_tokens_per_s is None
    names = {m["input"] for m in result.missing}
    assert {"gpu", "tp", "allreduce_us"} <= names
    assert any("decode_gpu_bandwidth_gb_s" in m["how"] for m in result.missing)
    assert lookup_gpu("NVIDIA Imaginary 9000") is None


def test_nonsense_config_names_the_field():
    with pytest.raises(DecodeInputError) as err:
        shape_from_config({**LLAMA_8B, "num_key_value_heads": 7})
    assert err.value.field == "num_key_value_heads"


def test_gpu_rows_have_sources():
    assert all(row.source.startswith("https://") for row in gpu_table())


def test_gguf_truncated_and_not_gguf():
    """Magic, v3, 0 tensors, 1 KV: key "general.architecture" = string "llama", cut short."""
    import struct
    key = b"general.architecture"
    data = (b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + struct.pack("<Q", len(key)) + key
            + struct.pack("<IQ", 8, 5) + b"llama")
    header = parse_gguf_header(data)
    assert header.architecture == "llama" and not header.truncated
    assert parse_gguf_header(data[:-3]).truncated
    with pytest.raises(DecodeInputError):
        parse_gguf_header(b"PK\x03\x04")


def test_link_is_allow_listed():
    from pydantic import ValidationError
    DecodeInputs(link="NV18")
    with pytest.raises(ValidationError):
        DecodeInputs(link="PIX; rm -rf /")
