"""The container role's decisions, as pure functions over facts (tested without a host).

- ``userspace_plan``: is the NVIDIA userspace at the host's exact version, can apt install
  it, or must the run refuse (and with which message);
- ``install_command``: the apt-get line that installs it without the kernel module;
- ``container_checks``: what the container sees, as audit Checks (ok / P0 / P1).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pyinfra.api import StringCommand

from gpunode.facts.dpkg import upstream_version
from gpunode.ops.shell import argv_text
from gpunode.profile.check import Check, ok

__all__ = ["UserspacePlan", "container_checks", "install_command", "userspace_plan"]

MISMATCH = "NVML: Driver/library version mismatch"


@dataclass(frozen=True)
class UserspacePlan:
    ok: bool
    """Every package is installed at the wanted upstream version."""
    refusal: str | None = None
    """Why apt can't install the wanted version (None: it can, or nothing to do)."""


def _offered(versions: Sequence[str]) -> list[str]:
    seen: list[str] = []
    for version in versions:
        upstream = upstream_version(version)
        if upstream not in seen:
            seen.append(upstream)
    return seen


def userspace_plan(
    container: str,
    wanted: str,
    packages: Sequence[str],
    installed: Mapping[str, str],
    available: Mapping[str, Sequence[str]],
) -> UserspacePlan:
    """Decide for the NVIDIA userspace packages of one container.

    ``installed`` maps package -> installed Debian version, ``available`` package ->
    versions apt offers (``apt-cache madison``). The match is on the upstream version
    (``550.127.05`` of ``550.127.05-1~deb12u1``): that is what the kernel module checks.
    """
    if all(p in installed and upstream_version(installed[p]) == wanted for p in packages):
        return UserspacePlan(ok=True)
    lacking = [
        p for p in packages if not any(upstream_version(v) == wanted for v in available.get(p, []))
    ]
    if not lacking:
        return UserspacePlan(ok=False)
    offers = "; ".join(
        f"{p}: {', '.join(_offered(available.get(p, []))) or 'nothing'}" for p in lacking
    )
    return UserspacePlan(
        ok=False,
        refusal=(
            f"{container}: refusing to install the NVIDIA userspace driver: the Proxmox host "
            f"runs {wanted} and the container's libraries must equal it exactly (else "
            f"'{MISMATCH}'), but apt in the container offers no {wanted} for {offers}. "
            f"Add an apt source that carries {wanted} (NVIDIA's CUDA repository for this "
            "Debian release keeps every driver version; Debian's own carries the one of its "
            "release), or install that driver version on the host."
        ),
    )


def install_command(packages: Sequence[str], version: str) -> StringCommand:
    """``apt-get install PKG=VERSION-*`` for every package, without recommends.

    ``VERSION-*`` is apt's version prefix match (any Debian revision of that upstream
    version); ``--no-install-recommends`` keeps nvidia-kernel-dkms out (libcuda1 recommends
    it, and a container can't load modules); downgrades are allowed so a newer library can
    come back to the host's version; the role holds the packages afterwards.
    """
    return StringCommand(
        "DEBIAN_FRONTEND=noninteractive "
        + argv_text(
            "apt-get", "install", "-y", "-q", "--no-install-recommends", "--allow-downgrades",
            "--allow-change-held-packages", *(f"{p}={version}-*" for p in packages),
        )
    )


def _gpu_nodes(nodes: Sequence[Mapping[str, Any]]) -> list[str]:
    paths = [str(n["path"]) for n in nodes if n.get("kind") == "char"]
    return sorted(p for p in paths if p.removeprefix("/dev/nvidia").isdigit())


def container_checks(
    state: Mapping[str, Any],
    expected_gpus: int | None,
    host_driver: str | None,
    installed: Mapping[str, str],
) -> list[Check]:
    """The container's readiness, from ``ContainerGpuState`` and the installed packages.

    - GPUs: ``nvidia-smi -L`` lists as many GPUs as were passed in (``expected_gpus``,
      else the /dev/nvidiaN nodes the container has);
    - memlock: ``ulimit -l`` is unlimited (CUDA pins host memory; only the Proxmox host's
      ``lxc.prlimit.memlock`` can raise it, and only at the container's start);
    - driver: the userspace packages equal the host's module version.
    """
    checks: list[Check] = []
    nodes = _gpu_nodes(state.get("nodes") or [])
    want = expected_gpus if expected_gpus is not None else len(nodes)
    seen = len(state.get("gpus") or [])
    name = "container GPUs"
    if state.get("smi_rc") != 0:
        error = state.get("smi_error") or f"exit status {state.get('smi_rc')}"
        fix = "deploy/containers.py installs the userspace driver at the host's version"
        if MISMATCH in error:
            fix = "install the userspace driver at the host's exact version (deploy/containers.py)"
        checks.append(Check(name=name, status="P0", live=f"nvidia-smi: {error}",
                            want=f"{want} GPU(s)", fix=fix, deploy_fixes=True))
    elif want == 0:
        checks.append(Check(name=name, status="P0", live=f"{seen} GPU(s), no /dev/nvidiaN",
                            want="GPUs passed in",
                            fix="declare the container on its Proxmox host and run "
                            "deploy/containers.py there (then pct reboot VMID)"))
    elif seen != want:
        checks.append(Check(name=name, status="P0", live=f"nvidia-smi lists {seen}",
                            want=f"{want} (passed: {', '.join(nodes) or 'none'})",
                            fix="compare the spec's gpus with /dev/nvidiaN on the host and the "
                            "lxc.cgroup2.devices.allow lines of /etc/pve/lxc/VMID.conf"))
    else:
        checks.append(ok(name, f"nvidia-smi lists {seen}", f"{want}"))

    memlock = state.get("memlock")
    if memlock == "unlimited":
        checks.append(ok("container memlock", "ulimit -l unlimited", "unlimited"))
    else:
        init = state.get("init_memlock")
        live = f"ulimit -l {memlock or 'unknown'}" + (f"; init {init}" if init else "")
        fix = ("set memlock: unlimited in the container's spec on the Proxmox host "
               "(lxc.prlimit.memlock) and restart it")
        if init == "unlimited":
            fix = ("the container gives unlimited, a login limit lowers it: check "
                   "/etc/security/limits.d/ and the service's LimitMEMLOCK in the container")
        checks.append(Check(name="container memlock", status="P1", live=live,
                            want="unlimited", fix=fix, pending="restart"))

    host_version = host_driver or state.get("module_version")
    name = "container NVIDIA userspace"
    versions = sorted({upstream_version(v) for v in installed.values()})
    if host_version is None:
        checks.append(Check(name=name, status="P0", live=", ".join(versions) or "none",
                            want="the host's driver",
                            fix="load the NVIDIA module on the host (/proc/driver/nvidia/version "
                            "is empty)"))
    elif versions == [host_version]:
        checks.append(ok(name, host_version, host_version))
    else:
        checks.append(Check(name=name, status="P0", live=", ".join(versions) or "not installed",
                            want=host_version, deploy_fixes=True,
                            fix="run deploy/containers.py for this container"))
    return checks
