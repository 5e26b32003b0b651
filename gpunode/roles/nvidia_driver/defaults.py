"""nvidia_driver defaults: the NodeProfile fields it reads.

| field                | default         | why                                                   |
|----------------------|-----------------|-------------------------------------------------------|
| nvidia_driver        | None (no pin)   | host and containers must run one exact driver version |
| nvidia_driver_change | False           | a driver change restarts every GPU workload: opt in   |
| nvidia_packages      | [nvidia-driver] | what to install when no NVIDIA package is present yet |
"""

from gpunode.roles.profile.node import NodeProfile

DEFAULTS = NodeProfile()
