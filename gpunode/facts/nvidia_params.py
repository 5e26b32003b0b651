"""The NVIDIA modules' live parameters: /proc/driver/nvidia/params (the nvidia module's NVreg_*
registry, "DynamicPowerManagement: 3") and /sys/module/<module>/parameters/<name> (nvidia_uvm,
nvidia_modeset ...), read for the parameters a profile sets."""

from __future__ import annotations

import re

from pyinfra.api import FactBase

PROC_PARAMS = "/proc/driver/nvidia/params"
_PROC_LINE_RE = re.compile(r"^(?P<name>[A-Za-z][A-Za-z0-9_]*):\s*(?P<value>.*)$")
_SYS_LINE_RE = re.compile(r"^/sys/module/(?P<module>[a-z0-9_]+)/parameters/(?P<name>[A-Za-z0-9_]+)"
                          r":(?P<value>.*)$")


def parse_module_params(text: str) -> dict[str, str]:
    """Lines of /proc/driver/nvidia/params (after a "proc" line) and `grep -H` lines of
    /sys/module/*/parameters/* -> {"nvidia/NVreg_DynamicPowerManagement": "3", ...}."""
    values: dict[str, str] = {}
    in_proc = False
    for raw in (text or "").splitlines():
        line = raw.strip()
        if line in ("@proc", "@sys"):
            in_proc = line == "@proc"
            continue
        sys_match = _SYS_LINE_RE.match(line)
        if sys_match:
            values[f"{sys_match.group('module')}/{sys_match.group('name')}"] = \
                sys_match.group("value").strip()
            continue
        proc_match = _PROC_LINE_RE.match(line) if in_proc else None
        if proc_match:
            values.setdefault(f"nvidia/NVreg_{proc_match.group('name')}",
                              proc_match.group("value").strip())
    return values


class NvidiaModuleParams(FactBase):
    """{"module/param": live value} for the given "module/param" names (absent: not loaded
    or not exposed)."""

    @staticmethod
    def default() -> dict[str, str]:
        return {}

    def command(self, params: list[str] | None = None) -> str:
        paths = " ".join(f"/sys/module/{p.split('/')[0]}/parameters/{p.split('/')[1]}"
                         for p in params or [] if re.fullmatch(r"[a-z0-9_]+/[A-Za-z0-9_]+", p))
        sys_part = f"grep -H . {paths} 2>/dev/null; " if paths else ""
        return f"echo @proc; cat {PROC_PARAMS} 2>/dev/null; echo @sys; {sys_part}true"

    def process(self, output: list[str]) -> dict[str, str]:
        return parse_module_params("\n".join(output))
