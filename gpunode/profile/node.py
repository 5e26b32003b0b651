"""NodeProfile: the declared state of one GPU host, validated before any host is touched.

Every default is the inference profile; the figure behind each one is the audit of the 8-GPU
PCIe node that ran at 3.4% of its theoretical decode speed (see docs/settings.md).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import (
    Field,
    field_validator,
    model_validator,
)

from gpunode.profile.allowed import (
    ABSOLUTE_DIR,
    CMDLINE_KEY,
    CMDLINE_VALUE,
    CPU_GOVERNORS,
    DRIVER_VERSION,
    MODULE_NAME,
    PACKAGE_NAME,
    SYSCTL_KEY,
    TIME_SPAN,
    CpuGovernor,
    check,
    check_output_path,
    checked_power_limit,
    is_kernel_release,
    shown,
)
from gpunode.profile.danger import check_i_know, node_dangers, unacknowledged
from gpunode.profile.decode_keys import BANDWIDTH_DOC, MODEL_CONFIG_DOC, ModelConfigPath
from gpunode.profile.docs import setting_doc
from gpunode.profile.nvidia_options import check_module_options
from gpunode.profile.pcie_selector import PcieSelector, ProfileModel
from gpunode.profile.sysctls import DEFAULT_SYSCTLS, SYSCTLS_DOC, merged_sysctls

MAX_READ_REQUEST_SIZES = (128, 256, 512, 1024, 2048, 4096)
MAX_GPU_INDEX = 63
#: Deepest C-state index any CPU has (Intel C10); a larger cap is a typo.
MAX_CSTATE_LIMIT = 10
#: RLIMIT_MEMLOCK upper bound in bytes (1 PiB): a larger number is a typo, use 'unlimited'.
MEMLOCK_LIMIT = 1 << 50


Vmid = Annotated[int, Field(strict=True, ge=100, le=999_999_999)]
"""A Proxmox guest id (below 100 reserved)."""


class NodeProfile(ProfileModel):
    """The declared tuning of one GPU host. Every field has the inference default."""

    modules: list[str] = Field(
        ["nvidia_peermem"],
        max_length=64,
        description="Kernel modules loaded now and at every boot (/etc/modules-load.d). "
        "nvidia_peermem (GPUDirect RDMA) is loaded only where an RDMA device exists, "
        "unless listed in required_modules.",
        json_schema_extra=setting_doc(
            why="GPUDirect RDMA not loaded",
            runtime="`modprobe`",
            persistence="`/etc/modules-load.d/gpunode.conf`",
            readback="`/sys/module/<name>`",
        ),
    )
    required_modules: list[str] = Field(
        [],
        max_length=64,
        description="Modules that must load: a missing one fails the run instead of being "
        "reported as not applicable.",
        json_schema_extra=setting_doc(
            runtime="a listed module that can't load fails the run",
        ),
    )
    max_read_request: int = Field(
        4096, description="PCIe MaxReadReq in bytes for the selected devices (audit: 512).",
        json_schema_extra=setting_doc(
            why="MaxReadReq 512",
            runtime="`setpci -s BDF CAP_EXP+8.w=5000:7000` (bits 14:12 only)",
            persistence="`gpunode-tune.service` at boot",
            readback="DevCtl via `lspci -vvv`",
        ),
    )
    pcie_selector: PcieSelector = Field(
        default_factory=PcieSelector, description="Devices whose MaxReadReq is set.",
        json_schema_extra=setting_doc(
            runtime="only matching functions are touched",
            persistence="same selector in the boot script",
        ),
    )
    sysctls: dict[str, str] = Field(
        default_factory=lambda: dict(DEFAULT_SYSCTLS),
        description="sysctl key -> value. Given keys are merged over the defaults; a value of "
        "null removes a default. Keys are dotted names; values are integers or integers "
        "separated by spaces, except net.ipv4.tcp_congestion_control, "
        "net.ipv4.tcp_allowed_congestion_control and net.core.default_qdisc (names).",
        json_schema_extra=SYSCTLS_DOC,
    )
    max_cstate: int | None = Field(
        1,
        description=f"Deepest C-state allowed (0 = poll only, 1 = C1, up to "
        f"{MAX_CSTATE_LIMIT}). None leaves C-states alone.",
        json_schema_extra=setting_doc(
            why="C2 allowed (100 µs wake-up)",
            runtime="`cpuidle/stateN/disable` for deeper states",
            persistence="cmdline `processor.max_cstate=1` (+ `intel_idle.max_cstate=1` on "
                        "Intel; `0` → `idle=poll`) + boot unit",
            readback="cpuidle sysfs, `/sys/module/*/parameters/max_cstate`",
        ),
    )
    cpu_governor: CpuGovernor | None = Field(
        "performance",
        description="cpufreq scaling governor (one the kernel knows: "
        f"{', '.join(CPU_GOVERNORS)}); None leaves it alone.",
        json_schema_extra=setting_doc(
            runtime="`scaling_governor`",
            persistence="boot unit",
            readback="sysfs",
        ),
    )
    amd_pstate: Literal["active", "passive", "guided"] | None = Field(
        "active",
        description="amd_pstate mode put on the cmdline of AMD hosts (audit: "
        "acpi-cpufreq was in use). Ignored on Intel.",
        json_schema_extra=setting_doc(
            why="acpi-cpufreq instead of amd_pstate",
            persistence="cmdline `amd_pstate=active` (AMD only)",
            readback="`/sys/devices/system/cpu/amd_pstate/status`",
        ),
    )
    memlock: Literal["unlimited"] | int = Field(
        "unlimited",
        description="RLIMIT_MEMLOCK for the host: 'unlimited' or bytes (65536 up to 2**50).",
        json_schema_extra=setting_doc(
            why="RLIMIT_MEMLOCK ~63 GB",
            runtime="`systemctl daemon-reload` (systemd re-reads system.conf.d on reload)",
            persistence="`/etc/security/limits.d/90-gpunode-memlock.conf` + `DefaultLimitMEMLOCK`",
            readback="`systemctl show -p DefaultLimitMEMLOCK`",
        ),
    )
    cmdline: dict[str, str | None] = Field(
        {},
        max_length=64,
        description="Extra kernel cmdline parameters: key -> value, or null for a bare flag. "
        "Values: letters, digits and _ . , : / = + - @ % ~ (no spaces, quotes or $), up to "
        "256 characters.",
        json_schema_extra=setting_doc(
            persistence="your own `key: value` (or `key: null` flag)",
            readback="`/proc/cmdline`",
        ),
    )
    kernel_pin: str | None = Field(
        None,
        description="Kernel to keep: a kernel release such as '6.8.12-4-pve' or "
        "'6.12.117+deb13-amd64', 'running', or None for no pin.",
        json_schema_extra=setting_doc(
            why="kernel nine patches behind",
            persistence="Proxmox: `proxmox-boot-tool kernel pin`; Debian: `GRUB_DEFAULT`; "
                        "apt hold of the kernel package",
            readback="`uname -r`",
        ),
    )
    nvidia_driver: str | None = Field(
        None, description="NVIDIA driver version to hold, e.g. '550.127.05'; None = no pin.",
        json_schema_extra=setting_doc(
            persistence="apt preferences pin + apt hold; a mismatch is reported",
            readback="`/proc/driver/nvidia/version`",
        ),
    )
    nvidia_packages: list[str] | None = Field(
        None,
        max_length=64,
        description="Driver packages to install when nvidia_driver_change allows it and no "
        "NVIDIA package is installed yet. None = chosen by nvidia_kernel_modules and "
        "nvidia_repository: Debian nvidia-driver + nvidia-open-kernel-dkms (open) or "
        "nvidia-kernel-dkms (proprietary); CUDA repository nvidia-open or cuda-drivers.",
        json_schema_extra=setting_doc(
            runtime="what to install when none is installed; `null` = the flavour's packages for "
                    "`nvidia_repository`",
        ),
    )
    nvidia_repository: Literal["debian", "cuda"] = Field(
        "debian",
        description="Where the driver packages come from, for their names: debian (Debian's "
        "non-free/contrib) or cuda (NVIDIA's CUDA repository).",
        json_schema_extra=setting_doc(
            runtime="package names: `debian` (non-free/contrib) or `cuda` (NVIDIA's CUDA "
                    "repository)",
        ),
    )
    nvidia_kernel_modules: Literal["auto", "open", "proprietary"] = Field(
        "auto",
        description="NVIDIA kernel module flavour. auto = open wherever every GPU supports it "
        "(Turing and newer; Blackwell runs only on open), proprietary for older GPUs. The "
        "loaded flavour (/proc/driver/nvidia/version, modinfo license) is read and a mismatch "
        "reported; the flavour's packages are installed only when nvidia_driver_change allows "
        "it.",
        json_schema_extra=setting_doc(
            why="Blackwell on the proprietary modules does not start; Turing+ should use open",
            runtime="only reported; with `nvidia_driver_change` the flavour's packages are "
                    "installed: Debian `nvidia-driver` + `nvidia-open-kernel-dkms` / "
                    "`nvidia-kernel-dkms`, CUDA repo `nvidia-open` / `cuda-drivers`",
            persistence="the module the next boot loads",
            readback="`/proc/driver/nvidia/version` (\"Open Kernel Module\"), `modinfo nvidia` "
                     "license (`Dual MIT/GPL` / `NVIDIA`)",
        ),
    )
    gpu_persistence: bool = Field(
        True,
        description="Keep the driver initialised between clients: nvidia-persistenced "
        "installed, enabled and running, persistence mode Enabled on every GPU (read back "
        "from nvidia-smi). Without it each new process pays the GPU initialisation and power "
        "limits are lost. Not applicable on hosts without an NVIDIA driver.",
        json_schema_extra=setting_doc(
            why="persistence mode Disabled: GPU state torn down between clients, `-pl` lost",
            runtime="`nvidia-persistenced` installed, enabled, started; `nvidia-smi -pm 1`",
            persistence="the service + boot unit (`nvidia-smi -pm 1` after it)",
            readback="`nvidia-smi` persistence mode per GPU; \"not applicable\" without an NVIDIA "
                     "driver",
        ),
    )
    gpu_power_limit: int | Literal["default", "max"] | dict[int, int | Literal[
        "default", "max"]] | None = Field(
        None,
        description="GPU power limit in watts for every GPU, or per GPU index ({0: 300, 1: "
        "'max'}); 'default' / 'max' = the GPU's own default / maximum limit. None leaves the "
        "limits alone. Applied now (nvidia-smi -pl) and at every boot after "
        "nvidia-persistenced; a value outside a GPU's min..max is refused, naming the GPU, "
        "before any change.",
        json_schema_extra=setting_doc(
            why="limit below default",
            runtime="`nvidia-smi -i N -pl W` (watts, `default`, `max`; one value or `{index: "
                    "value}`); outside a GPU's min..max: refused before any change, naming GPU, "
                    "value, range",
            persistence="boot unit, after `nvidia-persistenced`",
            readback="`power.limit` right after the write; `nvidia-smi -q -x`",
        ),
    )
    nvidia_module_options: dict[str, int] = Field(
        {}, max_length=32,
        description="NVIDIA kernel module options (known NVreg_* options of nvidia and "
        "nvidia_uvm parameters, integers in each one's range; e.g. "
        "{NVreg_DynamicPowerManagement: 0} keeps GPUs out of runtime D3). Written to "
        "/etc/modprobe.d/gpunode-nvidia.conf; live at the next driver load.",
        json_schema_extra=setting_doc(
            why="driver defaults that don't suit a server (runtime power management)",
            persistence="`/etc/modprobe.d/gpunode-nvidia.conf`; `update-initramfs -u` when the "
                        "initramfs holds the module",
            readback="`/proc/driver/nvidia/params`, `/sys/module/<module>/parameters/`: "
                     "\"pending driver reload / reboot\" until they show the value",
        ),
    )
    pcie_acs_redirect: Literal["keep", "off"] = Field(
        "keep",
        description="off clears the ACS redirect bits (SrcValid, ReqRedir, CmpltRedir, "
        "UpstreamFwd, EgressCtrl) with a masked write of ECAP_ACS+0x6 on the bridges above the "
        "pcie_selector devices only, now and at every boot, so GPU peer-to-peer traffic stays "
        "in the PCIe switch. Cost: the IOMMU no longer isolates devices behind those bridges "
        "(their IOMMU groups are in effect one): not on hosts that pass devices to VMs.",
        json_schema_extra=setting_doc(
            why="ACS ReqRedir+/CmpltRedir+ above the GPUs: peer traffic through the root complex",
            runtime="`off`: `setpci -s BRIDGE ECAP_ACS+0x6.w=0000:003d` (SrcValid, ReqRedir, "
                    "CmpltRedir, UpstreamFwd, EgressCtrl) on the bridges above `pcie_selector` "
                    "devices only",
            persistence="boot unit (sysfs parents of the matched devices)",
            readback="ACSCtl read back after each write",
        ),
    )
    nvidia_driver_change: bool = Field(
        False,
        description="Allow installing the pinned driver when another version is installed "
        "(otherwise the mismatch is only reported).",
        json_schema_extra=setting_doc(
            runtime="allow installing the pinned driver",
        ),
    )
    nvidia_driver_containers: list[Vmid] = Field(
        default_factory=list,
        max_length=64,
        description="Proxmox containers (VMIDs, in start order) whose NVIDIA user-space "
        "libraries follow the host's driver: a change of nvidia_driver (with "
        "nvidia_driver_change) switches them in the same run as the host, or none of them "
        "(docs/upgrade.md).",
        json_schema_extra=setting_doc(
            runtime="`pct exec VMID -- apt-get install PKG=VER` in each, read back with "
                    "dpkg-query, held",
        ),
    )
    nvidia_driver_drain: Literal["refuse", "stop-containers"] = Field(
        "refuse",
        description="What a driver change does while processes hold /dev/nvidia*: refuse "
        "(nothing changed, the processes named), or stop-containers (pct stop the "
        "nvidia_driver_containers holding GPU devices in reverse start order, pct start the "
        "same ones after). Host processes are never stopped.",
        json_schema_extra=setting_doc(
            runtime="checked at plan time and again in the switch's script",
        ),
    )
    reboot: bool = Field(
        False, description="Allow the deploy to reboot to apply cmdline/kernel changes.",
        json_schema_extra=setting_doc(
            runtime="reboot (pyinfra `server.reboot`) when cmdline/kernel are not live yet; "
                    "otherwise \"pending reboot\"",
        ),
    )
    reboot_timeout: int = Field(
        900, ge=30, le=7200,
        description="Seconds to wait for the host to come back after a reboot (30-7200); "
        "a host that doesn't fails the run with its name.",
        json_schema_extra=setting_doc(
            runtime="how long the reboot may take before the run fails naming the host",
        ),
    )
    bootloader: Literal["auto", "grub", "systemd-boot"] = Field(
        "auto", description="How the cmdline is persisted; auto asks proxmox-boot-tool.",
        json_schema_extra=setting_doc(
            runtime="`auto` asks `proxmox-boot-tool status`: systemd-boot → "
                    "`/etc/kernel/cmdline` + `proxmox-boot-tool refresh`, else "
                    "`/etc/default/grub` + `update-grub`",
        ),
    )
    verify_timer: bool = Field(
        False,
        description="Install gpunode-verify.timer: every verify_interval the node re-reads "
        "its settings (sysctls, modules, MaxReadReq, C-states, governor, cmdline, memlock, "
        "kernel pin, GPU persistence mode, power limits, ACS) and the GPUs' health (Xid "
        "events, pending row remaps, PCIe links) with a read-only shell script and writes "
        "Prometheus textfile-collector metrics to metrics_dir/gpunode.prom, so drift between "
        "deploys shows in monitoring.",
        json_schema_extra=setting_doc(
            why="drift unseen between deploys",
            persistence="`gpunode-verify.timer` every `verify_interval`",
            readback="metrics in `metrics_dir` (see \"Drift you can watch\")",
        ),
    )
    verify_interval: str = Field(
        "15min", description="How often the verify timer runs: a systemd time span such as "
        "'15min', '1h' (one number and one unit: s, min, h, d)."
    )
    metrics_dir: str = Field(
        "/var/lib/prometheus/node-exporter",
        description="Where the verify timer writes gpunode.prom: the textfile-collector "
        "directory node_exporter reads (Debian's prometheus-node-exporter default).",
    )
    decode_model_config: ModelConfigPath | None = Field(None, description=MODEL_CONFIG_DOC)
    decode_gpu_bandwidth_gb_s: float | None = Field(None, gt=0, le=20000,
                                                    description=BANDWIDTH_DOC)

    allow_absent: list[str] = Field(
        [], max_length=256,
        description="sysctl keys that may be missing from a host's /proc/sys (a module not "
        "loaded yet, another kernel): without this a key the host lacks is refused in "
        "--dry and in the run, naming host and key (a typo such as vm.swapiness).",
    )
    i_know: list[str] = Field(
        [], max_length=32,
        description="Dangerous settings you mean (names from gpunode.profile.danger.DANGERS: "
        "kernel.modprobe, kernel.randomize_va_space, fs.suid_dumpable, vm.nr_hugepages, "
        "cmdline.init, cmdline.root, cmdline.module_blacklist, cmdline.modprobe.blacklist, "
        "pcie_selector.bridges): without the name the profile is refused.",
    )

    @field_validator("verify_interval")
    @classmethod
    def _time_span(cls, value: object) -> str:
        return check(TIME_SPAN, value, "a time span such as '15min' or '1h'")

    @field_validator("metrics_dir")
    @classmethod
    def _metrics_dir(cls, value: object) -> str:
        text = check(ABSOLUTE_DIR, value, "an absolute directory such as "
                     "'/var/lib/prometheus/node-exporter'")
        if check_output_path(text, "a metrics directory", base="/") != text:
            raise ValueError(f"{shown(value)} is not a normalised absolute directory")
        return text

    @field_validator("modules", "required_modules")
    @classmethod
    def _module_names(cls, value: list[str]) -> list[str]:
        for name in value:
            check(MODULE_NAME, name, "a kernel module name (letters, digits, _ -; up to 56)")
        return [name.replace("-", "_") for name in value]

    @field_validator("gpu_power_limit", mode="before")
    @classmethod
    def _power_limit(cls, value: object) -> object:
        return checked_power_limit(value, MAX_GPU_INDEX)

    @field_validator("nvidia_module_options", mode="before")
    @classmethod
    def _module_options(cls, value: object) -> object:
        return check_module_options(value)

    @field_validator("max_read_request")
    @classmethod
    def _mrrs(cls, value: int) -> int:
        if value not in MAX_READ_REQUEST_SIZES:
            raise ValueError(f"{value} is not a MaxReadReq size; allowed: {MAX_READ_REQUEST_SIZES}")
        return value

    @field_validator("sysctls", mode="before")
    @classmethod
    def _merge_sysctls(cls, value: object) -> object:
        return merged_sysctls(value)

    @field_validator("max_cstate")
    @classmethod
    def _cstate(cls, value: int | None) -> int | None:
        if value is not None and value < 0:
            raise ValueError(f"{value} is below 0; use 0 (poll only), 1 (C1) or deeper")
        if value is not None and value > MAX_CSTATE_LIMIT:
            raise ValueError(
                f"{value} is above {MAX_CSTATE_LIMIT}, the deepest C-state of any CPU; "
                "use 0 (poll only), 1 (C1) up to 10, or null to leave C-states alone"
            )
        return value

    @field_validator("memlock")
    @classmethod
    def _memlock(cls, value: str | int) -> str | int:
        if isinstance(value, int) and value < 65536:
            raise ValueError(f"{value} bytes is too small; use 'unlimited' or >= 65536")
        if isinstance(value, int) and value > MEMLOCK_LIMIT:
            raise ValueError(f"{value} bytes is above 2**50; use 'unlimited'")
        return value

    @field_validator("cmdline")
    @classmethod
    def _cmdline(cls, value: dict[str, str | None]) -> dict[str, str | None]:
        for key, item in value.items():
            check(CMDLINE_KEY, key, "a kernel parameter name (letters, digits, _ . -)")
            if item is not None and (not item or any(c.isspace() or c == '"' for c in item)):
                raise ValueError(
                    f"{key}={shown(item)}: give a non-empty value without spaces or quotes"
                )
            if item is not None and not CMDLINE_VALUE.fullmatch(item):
                raise ValueError(
                    f"{key}={shown(item)}: a kernel parameter value may hold letters, digits "
                    "and _ . , : / = + - @ % ~ (up to 256; no $, backquote, quote or ;)"
                )
        return value

    @field_validator("kernel_pin")
    @classmethod
    def _kernel_pin(cls, value: str | None) -> str | None:
        if value in (None, "running") or is_kernel_release(value):
            return value
        raise ValueError(
            f"{shown(value)} is not a kernel version such as '6.17.2-2-pve', "
            "'6.12.117+deb13-amd64' or 'running'"
        )

    @field_validator("nvidia_driver")
    @classmethod
    def _driver(cls, value: str | None) -> str | None:
        if value is not None:
            check(DRIVER_VERSION, value, "a version such as '550.127.05'")
        return value

    @field_validator("nvidia_driver_containers")
    @classmethod
    def _driver_containers(cls, value: list[int]) -> list[int]:
        if len(set(value)) != len(value):
            raise ValueError(f"each VMID once (start order), got {value}")
        return value

    @field_validator("nvidia_packages")
    @classmethod
    def _packages(cls, value: list[str] | None) -> list[str] | None:
        for name in value or []:
            check(PACKAGE_NAME, name, "a Debian package name such as 'nvidia-driver' "
                  "(lowercase letters, digits, + - .)")
        return value

    @field_validator("allow_absent")
    @classmethod
    def _absent_keys(cls, value: list[str]) -> list[str]:
        for key in value:
            check(SYSCTL_KEY, key, "a sysctl key such as 'vm.swappiness'")
        return value

    @field_validator("i_know")
    @classmethod
    def _acknowledged(cls, value: list[str]) -> list[str]:
        return check_i_know(value)

    @model_validator(mode="after")
    def _required_are_listed(self) -> NodeProfile:
        missing = [m for m in self.required_modules if m not in self.modules]
        if missing:
            raise ValueError(f"required_modules {missing} are not in modules: add them there")
        refusal = unacknowledged(node_dangers(self.sysctls, self.cmdline,
                                              self.pcie_selector.classes), self.i_know)
        if refusal:
            raise ValueError(refusal)
        return self

