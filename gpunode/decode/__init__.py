"""The decode model: how fast one stream (batch 1) could decode on given GPUs (docs/decode.md).

Pure: no pyinfra, no I/O but its own shipped data (gpus.yaml). gpus: the GPU table; shape: a
model's shape and parameter counts from its config.json; gguf: a GGUF file's header; step: the
decode step's terms, the ceiling and what binds it.
"""
