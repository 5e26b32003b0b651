"""The GGUF header reader on a real .gguf file: llama.cpp's models/ggml-vocab-llama-spm.gguf
(the Llama-2 SentencePiece vocabulary file its converter wrote: the model's hyperparameters
and tokenizer, no tensors; tests/data/SOURCES.md), whole and cut where the node's read cuts."""

from __future__ import annotations

from pathlib import Path

from gpunode.decode.gguf import HEAD_BYTES, config_from_gguf, parse_gguf_header, shape_from_gguf

FILE = Path(__file__).resolve().parents[2] / "data" / "decode" / "ggml-vocab-llama-spm.gguf"


def test_the_real_files_header_and_shape():
    header = parse_gguf_header(FILE.read_bytes())
    assert (header.version, header.architecture, header.file_type) == (3, "llama", 1)
    assert (header.tensor_count, header.kv_count, header.truncated) == (0, 22, False)
    assert header.kv["general.name"] == "llama-spm"
    assert header.kv["tokenizer.ggml.tokens"] == {"array": "string", "length": 32000}
    shape = shape_from_gguf(header)
    assert (shape.layers, shape.hidden, shape.heads, shape.kv_heads, shape.head_dim) == (
        32, 4096, 32, 32, 128)
    assert (shape.intermediate, shape.vocab) == (11008, 32000)
    # Llama-2-7B's shape: 6,738,415,616 weights, the count of meta-llama/Llama-2-7b-hf
    assert shape.total_params() == 6_738_415_616
    assert shape.kv_bytes_per_token(2) == 32 * 2 * 32 * 128 * 2


def test_a_cut_inside_the_token_array_keeps_its_length():
    # the node reads the file's first bytes: a cut inside tokenizer.ggml.tokens keeps the
    # hyperparameters and the array's length (read before its elements)
    data = FILE.read_bytes()
    header = parse_gguf_header(data[:64 * 1024])
    assert header.truncated
    assert header.kv["llama.block_count"] == 32
    assert header.kv["tokenizer.ggml.tokens"] == {"array": "string", "length": 32000}
    assert shape_from_gguf(header).total_params() == 6_738_415_616


def test_the_nodes_read_of_the_first_head_bytes_gives_the_config():
    # what the audit's node read takes of a .gguf (gpunode.facts.engine_read's ggufhead)
    header = parse_gguf_header(FILE.read_bytes()[:HEAD_BYTES])
    config = config_from_gguf(header)
    assert config["architectures"] == ["llama"]
    assert (config["num_hidden_layers"], config["vocab_size"], config["intermediate_size"]) == (
        32, 32000, 11008)
    assert config["tie_word_embeddings"] is False  # no tensor infos read: the head counted apart
