"""gpunode's deploys, to call from a pyinfra deploy file (yours or the repository's deploy/*.py).

    from gpunode.deploys import site
    site()

Each reads the profile from the host's data (``gpunode`` / ``gpunode_profile_file``).
"""

from gpunode.deploys.audit import audit
from gpunode.deploys.containers import containers, containers_undo
from gpunode.deploys.host import host_tuning_only
from gpunode.deploys.site import site
from gpunode.deploys.undo import undo

__all__ = ["audit", "containers", "containers_undo", "host_tuning_only", "site", "undo"]
