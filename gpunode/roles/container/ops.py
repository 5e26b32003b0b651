"""The container role's operations, inside the container (reached with ``@pct`` or SSH):

- ``nvidia_userspace(version, packages, container)``: apt pin + ``apt-get install
  PKG=VERSION-*`` without recommends (no kernel module), or a refusal naming what apt offers;
- ``verify_container(expected_gpus, host_driver_version)``: nvidia-smi -L count, ``ulimit -l``,
  the driver libraries against the host's module; reports, changes nothing.

Each one plans from the run's snapshot (gpunode.facts.snapshot: the role's ``needs()``,
read once) and yields only what is needed; converged, it yields nothing and says why
(``host.noop``).
"""

from __future__ import annotations

from pyinfra import host, logger
from pyinfra.api import OperationError, operation

from gpunode.facts.sections import fact_data
from gpunode.facts.snapshot import Needs, Part, node, stale_if_changed
from gpunode.ops.apt import checked_apt_update
from gpunode.ops.changes import log_wrapped
from gpunode.ops.nvidia_pin import PREFERENCES_FILE
from gpunode.profile.check import summary_lines
from gpunode.pyinfra_adapter import is_executing
from gpunode.roles.container.defaults import DEFAULT_PACKAGES
from gpunode.roles.container.facts import AptVersions, ContainerGpuState
from gpunode.roles.container.plan import container_checks, install_command, userspace_plan


def needs(packages: list[str]) -> Needs:
    """What the container role reads: the userspace packages, installed and offered, the
    holds, the pin file, and what nvidia-smi and ulimit say inside."""
    return Needs(packages=tuple(packages), holds=True, files=(PREFERENCES_FILE,), parts=(
        Part(name="apt_versions", fact=AptVersions, kwargs=(("packages", tuple(packages)),)),
        Part(name="container_gpu", fact=ContainerGpuState)))


@operation()
def nvidia_userspace(version: str, packages: list[str], container: str = ""):
    """
    Install the NVIDIA userspace driver at exactly ``version``, without the kernel module.

    + version: the host's driver version, e.g. 550.127.05
    + packages: the userspace packages (gpunode.roles.container.defaults)
    + container: a name for messages (default: the pyinfra host name)

    The pin file (/etc/apt/preferences.d/90-gpunode-nvidia.pref) is written by the role
    before this runs. When apt offers the version for every package: ``apt-get install
    --no-install-recommends PKG=VERSION-*`` (recommends would pull nvidia-kernel-dkms). When
    not, one ``apt-get update`` and a second look; then a refusal naming the container, the
    host's version and the versions apt offers.
    """
    name = container or host.name
    installed = dict(node().packages)
    available = dict(node().parts.get("apt_versions") or {})
    plan = userspace_plan(name, version, packages, installed, available)
    if plan.ok:
        host.noop(f"NVIDIA userspace {version} installed ({', '.join(packages)})")
        return
    if plan.refusal is not None:
        # apt's lists may just be old (a fresh container has none): refresh once and look again.
        # Offline or a broken source: carry on, the second look says what apt has.
        # A rejected source signature is named with its fix if the version is still missing.
        update_errors = yield from checked_apt_update()
        if not is_executing():
            yield install_command(packages, version)
            return
        # After apt-get update, inside this operation: read again, past the snapshot.
        available = dict(fact_data(host.get_fact(AptVersions, packages=packages)) or {})
        plan = userspace_plan(name, version, packages, installed, available)
        if plan.refusal is not None:
            raise OperationError("\n".join([plan.refusal, *update_errors]))
        for error in update_errors:
            log_wrapped(logger.warning, error)
    yield install_command(packages, version)


@operation(is_idempotent=True)
def verify_container(
    expected_gpus: int | None = None,
    host_driver_version: str | None = None,
    packages: list[str] | None = None,
):
    """
    Read the container back: nvidia-smi sees the passed GPUs, ``ulimit -l`` is unlimited,
    the userspace driver equals the host's module. Reports; changes nothing.

    + expected_gpus: GPUs the container should see (None: its /dev/nvidiaN nodes)
    + host_driver_version: the host's module version (None: /proc/driver/nvidia/version)
    + packages: the userspace packages to compare with it
    """
    if not is_executing():
        host.noop("verify after the other operations ran")
        return
    packages = packages or DEFAULT_PACKAGES
    stale_if_changed()  # the install changed the container: read it again
    gpu_state = node().parts.get("container_gpu") or {}
    installed = dict(node().packages)
    checks = container_checks(gpu_state, expected_gpus, host_driver_version, installed)
    for line in summary_lines(host.name, checks):
        is_open = any(f" {rank} " in line for rank in ("P0", "P1"))
        (logger.warning if is_open else logger.info)(line)
    host.noop(f"verified: {sum(c.open for c in checks)} open")
    yield from ()
