"""NVIDIA driver and GPU state: `nvidia-smi -q -x` and /proc/driver/nvidia/version.

`parse_nvidia_smi_xml()` reads the XML report into `NvidiaSmiReport`. It copes with the
layouts real drivers print:
- power: `<power_readings><power_limit>` (drivers up to ~530) and
  `<gpu_power_readings><current_power_limit>` (535 and later);
- ECC counters: `<double_bit><total>` (Pascal/Volta era) and the `sram_*`/`dram_*` counters
  (Ampere and later, also `sram_uncorrectable_parity`/`_secded` on newer drivers);
- "N/A", "Not Found", "[N/A]", "Unknown Error" and similar become None.

Anything that is not an nvidia-smi XML report (empty output, "NVIDIA-SMI has failed because
it couldn't communicate with the NVIDIA driver", "Failed to initialize NVML: Driver/library
version mismatch") gives `present=False`, with the first line kept in `error`.

`parse_nvidia_proc_version()` reads the loaded kernel module's version from
/proc/driver/nvidia/version, for the proprietary ("NVIDIA UNIX x86_64 Kernel Module  550.54.15")
and the open ("NVIDIA UNIX Open Kernel Module for x86_64  565.57.01") modules. This is the
version that matters for LXC containers: their user-space libraries must match it exactly.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from fnmatch import fnmatchcase

from pydantic import Field
from pyinfra.api import FactBase

from .pcie import normalize_bdf
from .sections import FactModel

__all__ = [
    "NvidiaGpu",
    "NvidiaSmi",
    "NvidiaSmiReport",
    "nvidia_module_is_open",
    "parse_nvidia_proc_version",
    "parse_nvidia_smi_xml",
]


class NvidiaGpu(FactModel):
    index: int
    """Position in nvidia-smi's report (what `nvidia-smi -i N` means)."""
    name: str
    pci_bdf: str
    """Normalized BDF, "0000:01:00.0" (nvidia-smi prints "00000000:01:00.0")."""
    uuid: str
    minor_number: int | None = None
    """N of /dev/nvidiaN (may differ from index)."""
    temperature_c: int | None = None
    power_limit_w: float | None = None
    """Limit in force (current/enforced)."""
    power_default_limit_w: float | None = None
    power_min_limit_w: float | None = None
    power_max_limit_w: float | None = None
    architecture: str | None = None
    """`<product_architecture>` ("Ampere", "Hopper", "Blackwell"); None on old drivers."""
    sm_clock_mhz: int | None = None
    sm_clock_max_mhz: int | None = None
    ecc_mode: str | None = None
    """Current ECC mode: "Enabled", "Disabled" or None (not supported)."""
    ecc_errors_uncorrected: int | None = None
    """Volatile (since driver load) uncorrectable ECC errors; None when not reported."""
    pcie_gen_current: int | None = None
    pcie_gen_max: int | None = None
    pcie_width_current: int | None = None
    pcie_width_max: int | None = None
    persistence_mode: str | None = None
    mig_mode: str | None = None


class NvidiaSmiReport(FactModel):
    present: bool
    """nvidia-smi ran and produced its XML report."""
    driver_version: str | None = None
    cuda_version: str | None = None
    gpus: list[NvidiaGpu] = Field(default_factory=list)
    error: str | None = None
    """First line of nvidia-smi's output when it printed something other than XML."""


# --- nvidia-smi -q -x ----------------------------------------------------------------------

SMI_MISSING = ("n/a", "[[]*", "not found", "unknown", "unknown error", "none", "not supported",
               "error*")
"""nvidia-smi's words for "no value" ("N/A", "[N/A]", "[Not Supported]", "Unknown Error"...), as
globs over the lower-cased text: this parser and the verify timer's script read with them."""
PERSISTENCE_PATH = "persistence_mode"
PERSISTENCE_ENABLED = "Enabled"
POWER_LIMIT_PATHS = tuple(
    f"{group}/{name}" for group in ("gpu_power_readings", "power_readings")
    for name in ("current_power_limit", "enforced_power_limit", "power_limit"))
"""Where a GPU's power limit in force is, first found first: `<gpu_power_readings>` (535 and
later; not `<module_power_readings>`), then `<power_readings>` (older drivers)."""
_NUMBER_RE = re.compile(r"[-+]?\d+(?:\.\d+)?")


def _text(node: ET.Element | None, path: str) -> str | None:
    if node is None:
        return None
    found = node.find(path)
    if found is None or found.text is None:
        return None
    value = " ".join(found.text.split())
    return None if smi_missing(value) else value


def smi_missing(value: str) -> bool:
    """An element's text says there is no value (empty, or one of SMI_MISSING)."""
    return not value or any(fnmatchcase(value.lower(), word) for word in SMI_MISSING)


def _number(value: str | None) -> float | None:
    if value is None:
        return None
    match = _NUMBER_RE.search(value)
    if not match:
        return None
    try:
        return float(match.group(0))
    except ValueError:
        return None


def _int(value: str | None) -> int | None:
    number = _number(value)
    return None if number is None else int(number)


def _first(node: ET.Element, *paths: str) -> str | None:
    for path in paths:
        value = _text(node, path)
        if value is not None:
            return value
    return None


def _uncorrected(gpu: ET.Element) -> int | None:
    volatile = gpu.find("ecc_errors/volatile")
    if volatile is None:
        return None
    double_bit = volatile.find("double_bit")
    if double_bit is not None:
        return _int(_text(double_bit, "total"))
    total: int | None = None
    for child in volatile:
        if "uncorrectable" not in child.tag:
            continue
        value = _int(_text(volatile, child.tag))
        if value is not None:
            total = (total or 0) + value
    return total


def _parse_gpu(index: int, gpu: ET.Element) -> NvidiaGpu:
    bus_id = gpu.get("id") or _text(gpu, "pci/pci_bus_id") or ""
    power = gpu.find("gpu_power_readings")
    if power is None:
        power = gpu.find("power_readings")
    return NvidiaGpu(
        index=index,
        name=_text(gpu, "product_name") or "",
        pci_bdf=normalize_bdf(bus_id) if bus_id else "",
        uuid=_text(gpu, "uuid") or "",
        minor_number=_int(_text(gpu, "minor_number")),
        temperature_c=_int(_text(gpu, "temperature/gpu_temp")),
        power_limit_w=_number(_first(gpu, *POWER_LIMIT_PATHS)),
        power_default_limit_w=_number(_text(power, "default_power_limit")),
        power_min_limit_w=_number(_text(power, "min_power_limit")),
        power_max_limit_w=_number(_text(power, "max_power_limit")),
        architecture=_text(gpu, "product_architecture"),
        sm_clock_mhz=_int(_text(gpu, "clocks/sm_clock")),
        sm_clock_max_mhz=_int(_text(gpu, "max_clocks/sm_clock")),
        ecc_mode=_text(gpu, "ecc_mode/current_ecc"),
        ecc_errors_uncorrected=_uncorrected(gpu),
        pcie_gen_current=_int(_text(gpu, "pci/pci_gpu_link_info/pcie_gen/current_link_gen")),
        pcie_gen_max=_int(_text(gpu, "pci/pci_gpu_link_info/pcie_gen/max_link_gen")),
        pcie_width_current=_int(_text(gpu, "pci/pci_gpu_link_info/link_widths/current_link_width")),
        pcie_width_max=_int(_text(gpu, "pci/pci_gpu_link_info/link_widths/max_link_width")),
        persistence_mode=_text(gpu, PERSISTENCE_PATH),
        mig_mode=_text(gpu, "mig_mode/current_mig"),
    )


def _first_line(text: str) -> str | None:
    for line in text.splitlines():
        if line.strip():
            return line.strip()
    return None


def parse_nvidia_smi_xml(text: str) -> NvidiaSmiReport:
    """Parse `nvidia-smi -q -x`; never raises (not-an-XML-report -> present=False)."""
    if not text or not text.strip():
        return NvidiaSmiReport(present=False)
    start = text.find("<?xml")
    if start < 0:
        start = text.find("<nvidia_smi_log")
    if start < 0:
        return NvidiaSmiReport(present=False, error=_first_line(text))
    try:
        root = ET.fromstring(text[start:].strip())
    except ET.ParseError:
        return NvidiaSmiReport(present=False, error=_first_line(text))
    if root.tag != "nvidia_smi_log":
        return NvidiaSmiReport(present=False, error=_first_line(text))
    gpus: list[NvidiaGpu] = []
    for index, gpu in enumerate(root.findall("gpu")):
        try:
            gpus.append(_parse_gpu(index, gpu))
        except (ValueError, TypeError):
            continue
    return NvidiaSmiReport(
        present=True,
        driver_version=_text(root, "driver_version"),
        cuda_version=_text(root, "cuda_version"),
        gpus=gpus,
    )


# --- /proc/driver/nvidia/version -------------------------------------------------------------

_PROC_VERSION_RE = re.compile(
    r"NVRM version:.*?Kernel Module(?:\s+for\s+\S+)?\s+(?P<version>\d+(?:\.\d+)+)\b"
)


def parse_nvidia_proc_version(text: str) -> str | None:
    """Module version ("550.54.15") from /proc/driver/nvidia/version; None if not loaded."""
    if not text:
        return None
    match = _PROC_VERSION_RE.search(text)
    return match.group("version") if match else None


def nvidia_module_is_open(text: str) -> bool | None:
    """True for the open kernel module, False for the proprietary one, None if none loaded."""
    if parse_nvidia_proc_version(text) is None:
        return None
    return "Open Kernel Module" in text


# --- facts ---------------------------------------------------------------------------------


class NvidiaSmi(FactBase):
    """`nvidia-smi -q -x` as an `NvidiaSmiReport`; present=False without nvidia-smi/driver."""

    @staticmethod
    def default() -> NvidiaSmiReport:
        return NvidiaSmiReport(present=False)

    def command(self) -> str:
        return "command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -q -x 2>&1 || true"

    def process(self, output: list[str]) -> NvidiaSmiReport:
        return parse_nvidia_smi_xml("\n".join(output))
