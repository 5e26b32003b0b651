"""NodeSnapshot: everything the checks read from one live node, gathered in one place."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict
from pyinfra import host

from roles.facts.cmdline import CmdlineState, KernelCmdline
from roles.facts.cpu import CpuPower, CpuState
from roles.facts.kernel_params import KernelParams, KernelParamsState
from roles.facts.pcie import PcieDevice, PcieDevices
from roles.facts.pcie_refusals import MaxReadReqRefusals
from roles.facts.sections import as_model, as_models
from roles.profile.node import NodeProfile


class NodeSnapshot(BaseModel):
    """The live values of one node (read-only facts, no side effects)."""

    model_config = ConfigDict(frozen=True)

    cmdline: CmdlineState
    cpu: CpuState
    kernel: KernelParamsState
    pcie: list[PcieDevice]
    mrrs_refused: dict[str, int] = {}


def gather_snapshot(profile: NodeProfile) -> NodeSnapshot:
    """Read the live node through the facts (the current pyinfra host)."""
    kernel = host.get_fact(
        KernelParams, sysctl_keys=sorted(profile.sysctls), modules=sorted(profile.modules)
    )
    return NodeSnapshot(
        cmdline=as_model(CmdlineState, host.get_fact(KernelCmdline)),
        cpu=as_model(CpuState, host.get_fact(CpuPower)),
        kernel=as_model(KernelParamsState, kernel),
        pcie=as_models(PcieDevice, host.get_fact(PcieDevices)),
        mrrs_refused=dict(host.get_fact(MaxReadReqRefusals) or {}),
    )
