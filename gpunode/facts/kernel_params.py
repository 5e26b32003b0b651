"""Live kernel parameters: sysctls, loaded and available modules, RDMA devices, memlock."""

from __future__ import annotations

import re
import shlex

from pyinfra.api import FactBase

from gpunode.facts.sections import (
    FactModel,
    cat_command,
    ls_command,
    section_command,
    split_sections,
)

SYSCTL_REFUSED_DIR = "/run/gpunode/sysctl-refused"
"""Best-effort sysctl writes the kernel did not take in this boot: one file per key holding the
value it kept refusing (tmpfs: cleared at boot, so each boot tries once more)."""


class KernelParamsState(FactModel):
    """sysctl values (None = not on this kernel), modules and memory-lock limits."""

    sysctls: dict[str, str] = {}
    sysctl_refused: dict[str, str] = {}
    """Best-effort keys the kernel refused in this boot -> the value it refused."""
    loaded_modules: list[str] = []
    available_modules: list[str] = []
    rdma_devices: list[str] = []
    memlock_pid1: str | None = None
    memlock_default: str | None = None
    memlock_session: str | None = None


def sysctl_path(key: str) -> str:
    """/proc/sys path of a sysctl key (dots become slashes)."""
    return "/proc/sys/" + key.replace(".", "/")


def normalize_sysctl_value(value: str) -> str:
    """Fold the kernel's tabs and runs of spaces ('4096\\t87380' -> '4096 87380')."""
    return " ".join(value.split())


SYSCTL_ROOT = "/proc/sys/"
_TAIL_HEADER = re.compile(r"^==> (/proc/sys/\S+) <==$")


def sysctl_key(path: str) -> str:
    """The sysctl key of a /proc/sys path (the inverse of sysctl_path)."""
    return path[len(SYSCTL_ROOT):].replace("/", ".")


def parse_sysctl_files(text: str) -> dict[str, str]:
    """`tail -v -n +1` of /proc/sys files (see sysctl_command) -> key -> value; a file tail
    could not open has no header, so its key is absent (not on this kernel, or unreadable)."""
    lines_of: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in text.splitlines():
        header = _TAIL_HEADER.match(line)
        if header:
            current = lines_of.setdefault(sysctl_key(header.group(1)), [])
        elif current is not None:
            current.append(line)
    return {key: normalize_sysctl_value(" ".join(lines)) for key, lines in lines_of.items()}


def parse_sysctl_lines(text: str) -> dict[str, str]:
    """Lines 'KEY=VALUE' (see sysctl_refused_command) -> values."""
    values: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip():
            values[key.strip()] = normalize_sysctl_value(value)
    return values


def parse_limits_memlock(text: str) -> str | None:
    """The soft 'Max locked memory' value from a /proc/PID/limits text."""
    for line in text.splitlines():
        if line.startswith("Max locked memory"):
            return line[len("Max locked memory"):].split()[0]
    return None


def sysctl_command(keys: list[str]) -> str:
    """Print each key's /proc/sys file under a `==> PATH <==` header, all in one process."""
    if not keys:
        return "true"
    paths = " ".join(shlex.quote(sysctl_path(key)) for key in keys)
    return f"tail -v -n +1 {paths}"


def sysctl_refused_command() -> str:
    """Print KEY=VALUE for each best-effort write recorded as refused in this boot."""
    folder = shlex.quote(SYSCTL_REFUSED_DIR)
    # shell builtins only (read, not $(cat)): no process per file
    return (f'for f in {folder}/*; do [ -f "$f" ] || continue; v=; read -r v < "$f"; '
            f'echo "${{f##*/}}=$v"; done')


def modules_available_command(modules: list[str]) -> str:
    """Print each module that modprobe can find (in modules.dep or built in); a loaded one
    (/sys/module/NAME) without asking modinfo (a process each)."""
    return "; ".join(
        f"{{ [ -e /sys/module/{shlex.quote(m.replace('-', '_'))} ] || "
        f"modinfo -F name {shlex.quote(m)} >/dev/null 2>&1; }} && echo {shlex.quote(m)}"
        for m in modules
    ) or "true"


def kernel_params_command(sysctl_keys: list[str], modules: list[str]) -> str:
    return "; ".join(
        [
            section_command("sysctl", sysctl_command(sysctl_keys)),
            section_command("sysctl_refused", sysctl_refused_command()),
            section_command(
                "modules", cat_command("/proc/modules") + "; " + ls_command("/sys/module")
            ),
            section_command("available", modules_available_command(modules)),
            section_command("rdma", ls_command("/sys/class/infiniband")),
            section_command("memlock_pid1", cat_command("/proc/1/limits")),
            section_command(
                "memlock_default", "systemctl show --value -p DefaultLimitMEMLOCK"
            ),
            section_command("memlock_session", "ulimit -l"),
        ]
    )


def parse_kernel_params(text: str) -> KernelParamsState:
    """Parse the output of kernel_params_command()."""
    sections = split_sections(text)
    # /proc/modules lines start with the name; /sys/module also lists built-in modules.
    loaded = {line.split()[0] for line in sections.get("modules", "").splitlines() if line.strip()}
    return KernelParamsState(
        sysctls=parse_sysctl_files(sections.get("sysctl", "")),
        sysctl_refused=parse_sysctl_lines(sections.get("sysctl_refused", "")),
        loaded_modules=sorted(loaded),
        available_modules=sorted(sections.get("available", "").split()),
        rdma_devices=sorted(sections.get("rdma", "").split()),
        memlock_pid1=parse_limits_memlock(sections.get("memlock_pid1", "")),
        memlock_default=(sections.get("memlock_default") or "").strip() or None,
        memlock_session=(sections.get("memlock_session") or "").strip() or None,
    )


class KernelParams(FactBase):
    """sysctl values, modules (loaded, available), RDMA devices and memlock limits."""

    def command(self, sysctl_keys: list[str], modules: list[str]) -> str:
        return kernel_params_command(sysctl_keys, modules)

    def process(self, output: list[str]) -> KernelParamsState:
        return parse_kernel_params("\n".join(output))
