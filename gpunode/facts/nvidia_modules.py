"""Which NVIDIA kernel module flavour a node runs, and which one its GPUs need.

Two flavours of the same driver exist (NVIDIA's "kernel_open" README):
- open: /proc/driver/nvidia/version says "NVIDIA UNIX Open Kernel Module for x86_64",
  `modinfo nvidia` says "license: Dual MIT/GPL"; supports Turing and newer only, and is the
  only flavour that runs Blackwell (data-center Blackwell needs R580 or later);
- proprietary: "NVIDIA UNIX x86_64 Kernel Module", "license: NVIDIA"; runs Maxwell through
  Ada/Hopper, not Blackwell.

The GPUs' architecture comes from nvidia-smi (`<product_architecture>`) where a driver runs,
else from the chip name lspci prints from pci.ids ("GA102", "AD102GL", "GB202"), which works
before any driver is installed. Package names differ between Debian's archive and NVIDIA's
CUDA repository: `flavour_packages()`.
"""

from __future__ import annotations

import re
from typing import Literal

from pyinfra.api import FactBase

from .nvidia import nvidia_module_is_open, parse_nvidia_proc_version
from .sections import FactModel, section_command, split_sections

Flavour = Literal["open", "proprietary"]
Repository = Literal["debian", "cuda"]

# Chip-name prefixes of pci.ids / NVIDIA codenames -> architecture.
CHIP_ARCHITECTURES = {
    "GK": "Kepler", "GM": "Maxwell", "GP": "Pascal", "GV": "Volta", "TU": "Turing",
    "GA": "Ampere", "GH": "Hopper", "AD": "Ada Lovelace", "GB": "Blackwell",
}
OPEN_CAPABLE = frozenset({"Turing", "Ampere", "Hopper", "Ada Lovelace", "Blackwell"})
OPEN_REQUIRED = frozenset({"Blackwell"})
KNOWN = frozenset(CHIP_ARCHITECTURES.values())

# Packages that carry each flavour's kernel module, by repository.
FLAVOUR_PACKAGES: dict[tuple[str, str], list[str]] = {
    ("debian", "open"): ["nvidia-driver", "nvidia-open-kernel-dkms"],
    ("debian", "proprietary"): ["nvidia-driver", "nvidia-kernel-dkms"],
    ("cuda", "open"): ["nvidia-open"],
    ("cuda", "proprietary"): ["cuda-drivers"],
}
# Installed packages that tell the flavour (Debian and CUDA repository names).
OPEN_MODULE_PACKAGES = frozenset({"nvidia-open-kernel-dkms", "nvidia-open-kernel-source",
                                  "nvidia-kernel-open-dkms", "nvidia-open"})
PROPRIETARY_MODULE_PACKAGES = frozenset({"nvidia-kernel-dkms", "nvidia-kernel-source",
                                         "cuda-drivers"})

_CHIP_RE = re.compile(r"\b(GK|GM|GP|GV|TU|GA|GH|AD|GB)\d{3}[A-Z]*\b")
_LICENSE_RE = re.compile(r"^\s*license:\s*(?P<license>.+?)\s*$", re.MULTILINE)


def architecture_from_name(name: str) -> str | None:
    """Architecture from an lspci device name: "NVIDIA Corporation AD102GL [RTX 6000 Ada
    Generation]" -> "Ada Lovelace"; None when no chip name is in it."""
    match = _CHIP_RE.search(name or "")
    return CHIP_ARCHITECTURES[match.group(1)] if match else None


def normalize_architecture(value: str | None) -> str | None:
    """nvidia-smi's `<product_architecture>` in the names used here ("Ada Lovelace")."""
    if not value:
        return None
    text = value.strip()
    for known in KNOWN:
        if text.lower() in (known.lower(), known.split()[0].lower()):
            return known
    return text


def parse_modinfo_license(text: str) -> str | None:
    """The `license:` of `modinfo nvidia` ("NVIDIA", "Dual MIT/GPL"); a bare value (the output
    of `modinfo -F license nvidia`) is taken as is; None for empty or error output."""
    match = _LICENSE_RE.search(text or "")
    if match:
        return match.group("license")
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    if len(lines) == 1 and ":" not in lines[0]:
        return lines[0]
    return None


def flavour_of_license(license_text: str | None) -> Flavour | None:
    if not license_text:
        return None
    if "MIT" in license_text or "GPL" in license_text:
        return "open"
    if license_text.strip() == "NVIDIA":
        return "proprietary"
    return None


def flavour_of_packages(installed: dict[str, str] | None) -> Flavour | None:
    """The flavour the installed packages carry; None when none or both are installed."""
    names = set(installed or {})
    is_open = bool(names & OPEN_MODULE_PACKAGES)
    is_proprietary = bool(names & PROPRIETARY_MODULE_PACKAGES)
    if is_open == is_proprietary:
        return None
    return "open" if is_open else "proprietary"


def wanted_flavour(setting: str, architectures: list[str]) -> tuple[Flavour | None, str]:
    """(flavour to run, why) for the profile's nvidia_kernel_modules and the GPUs' archs.

    None with the reason when no flavour runs every GPU (Blackwell beside pre-Turing, or an
    explicit flavour the GPUs can't run)."""
    archs = sorted({a for a in architectures if a})
    old = [a for a in archs if a in KNOWN and a not in OPEN_CAPABLE]
    required = [a for a in archs if a in OPEN_REQUIRED]
    if required and old:
        return None, (f"{', '.join(required)} needs the open modules, {', '.join(old)} the "
                      "proprietary ones: no flavour runs both")
    if setting == "proprietary" and required:
        return None, f"{', '.join(required)} GPUs run only on the open kernel modules"
    if setting == "open" and old:
        return None, f"the open kernel modules do not support {', '.join(old)} GPUs"
    if setting in ("open", "proprietary"):
        return setting, "set in the profile"  # type: ignore[return-value]
    if old:
        return "proprietary", f"{', '.join(old)} GPUs need the proprietary modules"
    if required:
        return "open", f"{', '.join(required)} GPUs run only on the open kernel modules"
    if archs:
        return "open", f"recommended by NVIDIA for {', '.join(archs)} GPUs"
    return "open", "recommended by NVIDIA for Turing and newer (no GPU architecture read)"


def flavour_packages(flavour: Flavour, repository: str) -> list[str]:
    """Packages that install the driver with this flavour's kernel module."""
    return list(FLAVOUR_PACKAGES[(repository, flavour)])


def gpu_architectures(smi_architectures: list[str | None], lspci_names: list[str]) -> list[str]:
    """The GPUs' architectures: nvidia-smi's where it reports them, else the lspci names'."""
    from_smi = [a for a in (normalize_architecture(x) for x in smi_architectures) if a]
    if from_smi:
        return from_smi
    return [a for a in (architecture_from_name(n) for n in lspci_names) if a]


# --- fact ------------------------------------------------------------------------------------

_VERSION_LINE_RE = re.compile(r"^\s*version:\s*(?P<version>\d+(?:\.\d+)+)\s*$", re.MULTILINE)


class NvidiaModuleState(FactModel):
    loaded_version: str | None = None
    loaded_flavour: Flavour | None = None
    """From /proc/driver/nvidia/version: what runs now."""
    installed_version: str | None = None
    installed_flavour: Flavour | None = None
    """From `modinfo nvidia` (the module the running kernel would load next)."""


def parse_module_state(text: str) -> NvidiaModuleState:
    """Output of NvidiaKernelModule's command (sections proc_version, modinfo)."""
    sections = split_sections(text or "")
    proc = sections.get("proc_version", "")
    modinfo = sections.get("modinfo", "")
    is_open = nvidia_module_is_open(proc)
    version = _VERSION_LINE_RE.search(modinfo)
    return NvidiaModuleState(
        loaded_version=parse_nvidia_proc_version(proc),
        loaded_flavour=None if is_open is None else ("open" if is_open else "proprietary"),
        installed_version=version.group("version") if version else None,
        installed_flavour=flavour_of_license(parse_modinfo_license(modinfo)),
    )


MODULE_STATE_COMMAND = "; ".join([
    section_command("proc_version", "[ -e /proc/driver/nvidia/version ] && "
                    "cat /proc/driver/nvidia/version"),
    # the whole output (its parm: lines too): the parser reads the version: and license: lines,
    # and a grep would be one more process (~50 ms in the lab's TCG guest)
    section_command("modinfo", "modinfo nvidia"),
])


class NvidiaKernelModule(FactBase):
    """Loaded and installed NVIDIA kernel module: version and flavour (open/proprietary)."""

    @staticmethod
    def default() -> NvidiaModuleState:
        return NvidiaModuleState()

    def command(self) -> str:
        return MODULE_STATE_COMMAND + "; true"

    def process(self, output: list[str]) -> NvidiaModuleState:
        return parse_module_state("\n".join(output))
