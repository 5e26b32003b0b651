"""gpunode's deploys, to call from a pyinfra deploy file (yours or the repository's deploy/*.py).

    from gpunode.deploys import site
    site()

or name one on pyinfra's command line (a module path, no deploy file needed):

    pyinfra INVENTORY gpunode.deploys.site --dry
    pyinfra INVENTORY gpunode.deploys.kernel_only --dry     # one role: gpunode.deploys.roles

Each reads the profile from the host's data (``gpunode`` / ``gpunode_profile_file``).
"""

from gpunode.deploys.audit import audit
from gpunode.deploys.containers import containers, containers_undo
from gpunode.deploys.host import host_tuning_only
from gpunode.deploys.roles import (
    gpu_runtime_only,
    kernel_only,
    nvidia_driver_only,
    verify_timer_only,
)
from gpunode.deploys.site import site
from gpunode.deploys.undo import undo

__all__ = ["audit", "containers", "containers_undo", "gpu_runtime_only", "host_tuning_only",
           "kernel_only", "nvidia_driver_only", "site", "undo", "verify_timer_only"]
