r"""audit defaults: the NodeProfile fields the audit reads besides the settings it checks
(its decode model's inputs, docs/decode.md). Each is documented once, in the schema
(gpunode/profile/node.py); the list below is generated from it (make docs).

<!-- gpunode:generated role:audit -->
- decode_model_config (default `null`): The audit's decode model (docs/decode.md): the path on
  the node of the config.json of the model its engines serve, read in the audit's one read, for
  an engine whose own config.json could not be found (a model the audit cannot see through
  /proc/PID/root). An absolute path ending in .json, no '..'; None: only the engines' own files.
- decode_gpu_bandwidth_gb_s (default `null`): The audit's decode model: the memory bandwidth of
  one of the node's GPUs in GB/s (10^9 bytes/s), used instead of the GPU table's datasheet
  figure (gpunode/decode/gpus.yaml), e.g. a GPU not in the table or a bandwidth you measured.
  None: the table's figure for the name nvidia-smi prints.
<!-- /gpunode:generated -->
"""

from gpunode.profile.node import NodeProfile

SCHEMA = NodeProfile
READS = ("decode_model_config", "decode_gpu_bandwidth_gb_s")
DEFAULTS = NodeProfile()
