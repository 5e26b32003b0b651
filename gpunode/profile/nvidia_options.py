"""The NVIDIA driver's values a profile may set: module options (an allow-list of known
NVreg_* options of nvidia and parameters of nvidia_uvm, each with its type and range) and GPU
power limits."""

from __future__ import annotations

from typing import NamedTuple

from gpunode.profile.allowed import shown


class ModuleOption(NamedTuple):
    module: str
    low: int
    high: int
    boolean: bool = False
    """A module bool: sysfs shows Y/N."""


#: Known options: name -> module and allowed range (from the driver's README, "Configuring
#: Power Management Support" and kernel-open/nvidia/nv-reg.h; nvidia_uvm's module_param list).
MODULE_OPTIONS: dict[str, ModuleOption] = {
    "NVreg_DynamicPowerManagement": ModuleOption("nvidia", 0, 3),
    "NVreg_PreserveVideoMemoryAllocations": ModuleOption("nvidia", 0, 1),
    "NVreg_EnableGpuFirmware": ModuleOption("nvidia", 0, 1),
    "NVreg_OpenRmEnableUnsupportedGpus": ModuleOption("nvidia", 0, 1),
    "NVreg_EnableStreamMemOPs": ModuleOption("nvidia", 0, 1),
    "NVreg_UsePageAttributeTable": ModuleOption("nvidia", 0, 1),
    "NVreg_InitializeSystemMemoryAllocations": ModuleOption("nvidia", 0, 1),
    "NVreg_EnableResizableBar": ModuleOption("nvidia", 0, 1),
    "NVreg_RestrictProfilingToAdminUsers": ModuleOption("nvidia", 0, 1),
    "NVreg_EnablePCIERelaxedOrderingMode": ModuleOption("nvidia", 0, 1),
    "NVreg_ModifyDeviceFiles": ModuleOption("nvidia", 0, 1),
    "NVreg_DeviceFileGID": ModuleOption("nvidia", 0, 65535),
    "NVreg_DeviceFileUID": ModuleOption("nvidia", 0, 65535),
    "NVreg_DeviceFileMode": ModuleOption("nvidia", 0, 0o777),
    "uvm_disable_hmm": ModuleOption("nvidia_uvm", 0, 1, boolean=True),
    "uvm_perf_prefetch_enable": ModuleOption("nvidia_uvm", 0, 1),
    "uvm_perf_access_counter_mimc_migration_enable": ModuleOption("nvidia_uvm", -1, 1),
}


def check_module_options(value: object) -> dict[str, int]:
    """The profile's nvidia_module_options: known names, integers (true/false for bools) in
    range; a ValueError naming the option, the value and what is allowed."""
    if not isinstance(value, dict):
        raise ValueError("give a mapping of option -> integer, such as "
                         "{NVreg_DynamicPowerManagement: 0}")
    out: dict[str, int] = {}
    for name, item in value.items():
        option = MODULE_OPTIONS.get(str(name))
        if option is None:
            raise ValueError(f"{shown(name)} is not a known NVIDIA module option; known: "
                             f"{', '.join(sorted(MODULE_OPTIONS))}")
        if isinstance(item, bool) and option.boolean:
            item = int(item)
        if isinstance(item, bool) or not isinstance(item, int) or not \
                option.low <= item <= option.high:
            raise ValueError(f"{name}: {shown(item)} is not allowed: give an integer "
                             f"{option.low}..{option.high}")
        out[str(name)] = item
    return out


def module_param_key(name: str) -> str:
    """"module/param", as the snapshot reads it back."""
    return f"{MODULE_OPTIONS[name].module}/{name}"


def live_matches(name: str, want: int, live: str | None) -> bool:
    """The live value (/proc/driver/nvidia/params or sysfs) is the wanted one."""
    if live is None:
        return False
    text = live.strip()
    if MODULE_OPTIONS[name].boolean:
        return text in (("Y", "1") if want else ("N", "0"))
    try:
        return int(text, 0) == want
    except ValueError:
        return False
