"""Parameter counts of real config.json files against their model cards (within 2%)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpunode.decode.shape import dtype_bytes_from_config, shape_from_config

DATA = Path(__file__).parents[2] / "data" / "decode"

# file -> (card's total, card's active per token, KV bytes a token at 2 bytes, bytes/weight).
CARDS = {
    "llama-3.1-8b.config.json": (8.03e9, 8.03e9, 32 * 2 * 8 * 128 * 2, 2.0),
    "mixtral-8x7b-v0.1.config.json": (46.7e9, 12.9e9, 32 * 2 * 8 * 128 * 2, 2.0),
    "qwen3-30b-a3b.config.json": (30.5e9, 3.3e9, 48 * 2 * 4 * 128 * 2, 2.0),
    # MLA: the latent (512) and the rotary key (64) a layer, 61 layers.
    "deepseek-v3.config.json": (671e9, 37e9, 61 * (512 + 64) * 2, 1.0),
}


@pytest.mark.parametrize("name", sorted(CARDS))
def test_params_within_2_percent_of_the_card(name):
    config = json.loads((DATA / name).read_text())
    shape = shape_from_config(config)
    total, active, kv, per_weight = CARDS[name]
    assert shape.total_params() == pytest.approx(total, rel=0.02)
    assert shape.active_params() == pytest.approx(active, rel=0.02)
    assert shape.kv_bytes_per_token(2) == kv
    assert dtype_bytes_from_config(config)[0] == per_weight


def test_moe_shapes_read_from_the_config():
    mixtral = shape_from_config(json.loads((DATA / "mixtral-8x7b-v0.1.config.json").read_text()))
    assert (mixtral.experts, mixtral.experts_per_token, mixtral.moe_layers) == (8, 2, 32)
    ds = shape_from_config(json.loads((DATA / "deepseek-v3.config.json").read_text()))
    assert (ds.experts, ds.shared_experts, ds.dense_layers, ds.moe_layers) == (256, 1, 3, 58)
    assert ds.mla and ds.kv_lora_rank == 512 and ds.q_lora_rank == 1536
    qwen = shape_from_config(json.loads((DATA / "qwen3-30b-a3b.config.json").read_text()))
    assert (qwen.experts, qwen.experts_per_token, qwen.moe_layers, qwen.qk_norm) == (
        128, 8, 48, True)
