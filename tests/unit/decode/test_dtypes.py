"""The engine's --kv-cache-dtype, --quantization and --dtype in the bytes a step reads
(gpunode/decode/dtypes.py), and in the audit's decode part with each shown with its flag."""

from __future__ import annotations

import pytest

from gpunode.decode.dtypes import engine_weight_bytes, kv_bytes

BF16 = {"torch_dtype": "bfloat16"}
FP32 = {"torch_dtype": "float32"}
AWQ = {"torch_dtype": "float16", "quantization_config": {"quant_method": "awq", "bits": 4}}


@pytest.mark.parametrize(("engine", "kv", "dtype", "want"), [
    ("vllm", None, None, 2.0),          # auto: the model dtype the engine runs
    ("vllm", "auto", "float32", 4.0),
    ("vllm", "fp8", None, 1.0),
    ("vllm", "fp8_e5m2", None, 1.0),
    ("sglang", "fp8_e4m3", None, 1.0),
    ("vllm", "bfloat16", None, 2.0),
    ("llama.cpp", None, None, 2.0),     # f16 K and V
    ("llama.cpp", "q8_0", None, (34 / 32 + 2) / 2),  # K in q8_0 blocks, V f16
    ("llama.cpp", "q4_0", None, (18 / 32 + 2) / 2),
])
def test_kv_bytes_of_an_element(engine, kv, dtype, want):
    value, source = kv_bytes(engine, kv, dtype)
    assert value == pytest.approx(want)
    assert source


def test_an_unknown_kv_dtype_is_no_number():
    value, source = kv_bytes("vllm", "int3")
    assert value is None and "int3" in source and "not a KV cache dtype" in source
    assert kv_bytes("llama.cpp", "q9_9", flag="-ctk")[0] is None


@pytest.mark.parametrize(("quantization", "dtype", "config", "want"), [
    ("fp8", None, BF16, 1.0),           # online FP8 of a bf16 checkpoint
    ("fp8", None, AWQ, None),           # a quantized checkpoint counts as stored
    (None, "float32", BF16, 4.0),
    (None, "half", FP32, 2.0),
    (None, "bfloat16", BF16, None),     # the same width: the files' bytes count
    (None, None, FP32, 2.0),            # auto runs an FP32 checkpoint in FP16
    (None, None, BF16, None),
    ("awq", None, BF16, None),          # not an online method: the files count
    ("fp8", None, None, None),          # no config.json: nothing to compare
])
def test_weight_bytes_the_engine_holds(quantization, dtype, config, want):
    value, why = engine_weight_bytes(quantization, dtype, config)
    assert value == want
    assert bool(why) == (want is not None)


def test_the_flags_in_the_audits_decode_part():
    from gpunode.facts.engine_metrics import EngineNumbers
    from gpunode.roles.audit.decode_report import decode_part
    from tests.unit.audit.test_decode_report import LLAMA_8B
    from tests.unit.audit.test_engine_checks import node_with, process

    p = process("vllm-22303-serve-enforce-eager-underscore", model_dir="/m",
                hf_config=LLAMA_8B, weight_bytes=16_060_522_496, weight_files=4)

    def part(**settings):
        q = p.model_copy(update={"settings": p.settings.model_copy(
            update={"tensor_parallel": 1, **settings})})
        _, snap = node_with(q)
        gpus = [snap.nvidia.gpus[0].model_copy(update={"name": "NVIDIA H100 80GB HBM3"})]
        snap = snap.model_copy(update={"nvidia": snap.nvidia.model_copy(update={"gpus": gpus})})
        return decode_part(snap, q, EngineNumbers(url="u", time_per_output_token_s=0.02))

    plain = part()
    assert plain["inputs"]["kv_dtype_bytes"]["value"] == 2
    fp8 = part(quantization="fp8", kv_cache_dtype="fp8",
               source={**p.settings.source, "quantization": "--quantization",
                       "kv_cache_dtype": "--kv-cache-dtype"})
    # 1 byte a weight (read params x 1) instead of the files' 2: the weights term halves
    read = 8_030_261_248 - 128_256 * 4096
    assert fp8["terms_ms"]["weights"] == pytest.approx(read / 3350e9 * 1e3)
    assert fp8["terms_ms"]["weights"] == pytest.approx(plain["terms_ms"]["weights"] / 2, rel=1e-4)
    assert fp8["terms_ms"]["kv"] == pytest.approx(plain["terms_ms"]["kv"] / 2)
    inputs = fp8["inputs"]
    assert inputs["kv_dtype_bytes"] == {"value": 1, "source": "--kv-cache-dtype fp8"}
    assert inputs["weight_bytes_per_param"]["value"] == 1
    assert inputs["weight_bytes_per_param"]["source"].startswith("--quantization fp8")
    assert inputs["weights_bytes"]["source"].startswith("not used")
    odd = part(kv_cache_dtype="int3")
    assert odd["ceiling_tokens_per_s"] is None
    assert [m["input"] for m in odd["missing"]] == ["kv_dtype_bytes"]
