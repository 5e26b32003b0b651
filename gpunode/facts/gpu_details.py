"""What the audit reads of the GPUs beyond the tuning facts: `nvidia-smi -q -x` details (clock
event reasons, temperature thresholds, pending ECC, BAR1, PCIe replays, remapped rows and
retired pages), `nvidia-smi nvlink -s` and the
nvidia-persistenced unit; their models and pure parsers (gathered by AuditFacts)."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

from pydantic import BaseModel, ConfigDict, Field

from gpunode.facts.pcie import normalize_bdf

SMI_YES = "yes"
"""nvidia-smi's "Yes" of a pending flag (compared lower-cased)."""
REMAP_PENDING_PATH = "remapped_rows/remapped_row_pending"
RETIRE_PENDING_PATHS = ("retired_pages/pending_retirement", "retired_pages/pending_blacklist")
REPAIR_PENDING_PATHS = (REMAP_PENDING_PATH, *RETIRE_PENDING_PATHS)
"""Below `<gpu>`: a row remap (Ampere and newer) or a page retirement (older) that waits for a
GPU reset or reboot; the audit and the verify timer read these."""
CLOCK_REASON_ACTIVE = "Active"
IDLE_REASON_PATHS = ("clocks_event_reasons/clocks_event_reason_gpu_idle",
                     "clocks_throttle_reasons/clocks_throttle_reason_gpu_idle")
"""The gpu_idle clock event reason (`clocks_throttle_*` before driver 535): Active = idle."""


class RemappedRows(BaseModel):
    """`<remapped_rows>`: rows remapped for correctable/uncorrectable errors, and whether a
    remap waits for a GPU reset (pending) or could not be made (failure)."""

    model_config = ConfigDict(frozen=True)

    correctable: int | None = None
    uncorrectable: int | None = None
    pending: bool = False
    failure: bool = False


class RetiredPages(BaseModel):
    """`<retired_pages>`: pages retired for single-bit and double-bit errors; pending = a
    retirement waits for a reboot or GPU reset."""

    model_config = ConfigDict(frozen=True)

    single_bit: int | None = None
    double_bit: int | None = None
    pending: bool = False


class GpuDetails(BaseModel):
    """What the audit reads from `nvidia-smi -q -x` beyond gpunode.facts.nvidia.NvidiaGpu."""

    model_config = ConfigDict(frozen=True)

    bdf: str
    active_clock_reasons: list[str] = Field(default_factory=list)
    """Clock event (throttle) reasons reported "Active": "gpu_idle", "sw_power_cap", ..."""
    temp_slowdown_c: int | None = None
    temp_shutdown_c: int | None = None
    ecc_pending: str | None = None
    bar1_total_mib: int | None = None
    fb_total_mib: int | None = None
    performance_state: str | None = None
    replay_counter: int | None = None
    """PCIe replays since driver load (`pci/replay_counter`): link errors the GPU retried."""
    remapped_rows: RemappedRows | None = None
    """Ampere and newer; None where the GPU does not remap rows."""
    retired_pages: RetiredPages | None = None
    """Pre-Ampere; None where the GPU does not retire pages."""


class NvlinkGpu(BaseModel):
    """One GPU block of `nvidia-smi nvlink -s`."""

    model_config = ConfigDict(frozen=True)

    index: int
    name: str = ""
    active_links: int = 0
    inactive_links: int = 0
    link_speed_gbs: float | None = None
    """Speed of the first active link (all links of a GPU run at one rate)."""
    message: str | None = None
    """NVML's line when it lists no link ("Unable to retrieve NVLink information as all links
    are inActive", "Device does not have or support Nvlink")."""


class UnitState(BaseModel):
    """A systemd unit as `systemctl is-enabled` / `is-active` print it ("" = not read)."""

    model_config = ConfigDict(frozen=True)

    installed: bool = False
    """The unit's program exists (command -v)."""
    enabled: str = ""
    active: str = ""


_UNIT_FIELDS = {"installed": "installed", "enabled": "enabled", "active": "active",
                "UnitFileState": "enabled", "ActiveState": "active"}


def parse_unit_state(text: str) -> UnitState:
    """Lines 'installed=yes|no', then `systemctl show -p UnitFileState -p ActiveState`'s
    (what is-enabled and is-active print; 'enabled=' and 'active=' lines are read too)."""
    values: dict[str, str] = {}
    for line in (text or "").splitlines():
        key, _, value = line.strip().partition("=")
        if key in _UNIT_FIELDS:
            values[_UNIT_FIELDS[key]] = value.strip()
    return UnitState(installed=values.get("installed") == "yes",
                     enabled=values.get("enabled", ""), active=values.get("active", ""))


_GPU_LINE_RE = re.compile(r"^GPU\s+(\d+):\s*(?P<body>.*)$")
_UUID_RE = re.compile(r"\s*\(UUID:[^)]*\)\s*")
_LINK_RE = re.compile(r"^Link\s+\d+:\s*(?P<state>.*)$")
_SPEED_RE = re.compile(r"(\d+(?:\.\d+)?)\s*GB/s")


def parse_nvlink_status(text: str) -> list[NvlinkGpu]:
    """`nvidia-smi nvlink -s` -> one NvlinkGpu per "GPU N:" block; [] for other text."""
    gpus: list[dict] = []
    for raw in (text or "").splitlines():
        line = raw.strip()
        if not line:
            continue
        gpu = _GPU_LINE_RE.match(line)
        if gpu:
            body = gpu.group("body")
            uuid = _UUID_RE.search(body)
            name, rest = ((body[: uuid.start()], body[uuid.end():]) if uuid else (body, ""))
            gpus.append({"index": int(gpu.group(1)), "name": name.strip(), "active_links": 0,
                         "inactive_links": 0, "link_speed_gbs": None,
                         "message": rest.strip() or None})
            continue
        if not gpus:
            continue
        current = gpus[-1]
        link = _LINK_RE.match(line)
        if link:
            speed = _SPEED_RE.search(link.group("state"))
            if speed and float(speed.group(1)) > 0:
                current["active_links"] += 1
                if current["link_speed_gbs"] is None:
                    current["link_speed_gbs"] = float(speed.group(1))
            else:
                current["inactive_links"] += 1
        elif current["message"] is None:
            current["message"] = line
    return [NvlinkGpu(**gpu) for gpu in gpus]


_NUMBER_RE = re.compile(r"\d+")


def _int_text(node: ET.Element | None, path: str) -> int | None:
    if node is None:
        return None
    found = node.find(path)
    if found is None or not found.text:
        return None
    match = _NUMBER_RE.search(found.text)
    return int(match.group(0)) if match else None


def _plain_text(node: ET.Element, path: str) -> str | None:
    found = node.find(path)
    if found is None or found.text is None:
        return None
    value = " ".join(found.text.split())
    return None if value in ("", "N/A", "[N/A]") else value


def _yes(node: ET.Element, *paths: str) -> bool:
    return any((_plain_text(node, path) or "").lower() == SMI_YES for path in paths)


def _remapped_rows(gpu: ET.Element) -> RemappedRows | None:
    node = gpu.find("remapped_rows")
    if node is None or len(node) == 0:  # "<remapped_rows>N/A</remapped_rows>": not supported
        return None
    return RemappedRows(correctable=_int_text(node, "remapped_row_corr"),
                        uncorrectable=_int_text(node, "remapped_row_unc"),
                        pending=_yes(gpu, REMAP_PENDING_PATH),
                        failure=_yes(node, "remapped_row_failure"))


def _retired_pages(gpu: ET.Element) -> RetiredPages | None:
    node = gpu.find("retired_pages")
    if node is None:
        return None
    single = _int_text(node, "multiple_single_bit_retirement/retired_count")
    double = _int_text(node, "double_bit_retirement/retired_count")
    pending = _yes(gpu, *RETIRE_PENDING_PATHS)
    if single is None and double is None and not pending:
        return None  # every field N/A: the GPU does not retire pages
    return RetiredPages(single_bit=single, double_bit=double, pending=pending)


def parse_gpu_details(text: str) -> dict[str, GpuDetails]:
    """Clock event reasons, temperature thresholds, pending ECC mode and BAR1/framebuffer
    sizes from `nvidia-smi -q -x`, by normalized BDF; {} for anything but the XML report."""
    start = (text or "").find("<nvidia_smi_log")
    if start < 0:
        return {}
    head = text.rfind("<?xml", 0, start)
    try:
        root = ET.fromstring(text[head if head >= 0 else start:].strip())
    except ET.ParseError:
        return {}
    details: dict[str, GpuDetails] = {}
    for gpu in root.findall("gpu"):
        bus_id = gpu.get("id") or _plain_text(gpu, "pci/pci_bus_id")
        if not bus_id:
            continue
        reasons_node = gpu.find("clocks_event_reasons")
        if reasons_node is None:
            reasons_node = gpu.find("clocks_throttle_reasons")
        active = []
        for child in list(reasons_node) if reasons_node is not None else []:
            if " ".join((child.text or "").split()) == CLOCK_REASON_ACTIVE:
                active.append(re.sub(r"^clocks_(?:event|throttle)_reason_", "", child.tag))
        bdf = normalize_bdf(bus_id)
        details[bdf] = GpuDetails(
            bdf=bdf,
            active_clock_reasons=active,
            temp_slowdown_c=_int_text(gpu, "temperature/gpu_temp_slow_threshold"),
            temp_shutdown_c=_int_text(gpu, "temperature/gpu_temp_max_threshold"),
            ecc_pending=_plain_text(gpu, "ecc_mode/pending_ecc"),
            bar1_total_mib=_int_text(gpu, "bar1_memory_usage/total"),
            fb_total_mib=_int_text(gpu, "fb_memory_usage/total"),
            performance_state=_plain_text(gpu, "performance_state"),
            replay_counter=_int_text(gpu, "pci/replay_counter"),
            remapped_rows=_remapped_rows(gpu),
            retired_pages=_retired_pages(gpu),
        )
    return details
