"""Allow-lists for every profile value that reaches a command, a template or a file.

Each pattern is matched whole (``re.fullmatch``: ``$`` would also match before a trailing
newline), and each ``check_*`` function raises ValueError saying what is allowed, so that
pydantic's error names the field and the loader adds host and value.
"""

from __future__ import annotations

import difflib
import ipaddress
import os
import posixpath
import re
from collections.abc import Iterable
from typing import Literal, get_args

from pydantic import BaseModel, ConfigDict, ValidationInfo, field_validator

#: Kernel module names (MODULE_NAME_LEN is 56); no leading '-' (it would be a modprobe option).
MODULE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_\-]{0,55}")
#: Dotted sysctl names ('vm.swappiness', 'net.ipv4.conf.eth0.rp_filter').
SYSCTL_KEY = re.compile(r"[a-z0-9_][a-z0-9_\-]*(?:\.[a-z0-9_][a-z0-9_\-]*)+")
#: One integer or several separated by single spaces ('0', '4096 87380 134217728', '-1').
SYSCTL_INTEGERS = re.compile(r"-?[0-9]{1,20}(?: -?[0-9]{1,20}){0,7}")
#: Words for the string-valued keys below ('bbr', 'fq', 'reno cubic bbr').
SYSCTL_WORDS = re.compile(r"[A-Za-z0-9_\-]{1,32}(?: [A-Za-z0-9_\-]{1,32}){0,15}")
#: sysctls whose value is a name rather than a number. kernel.core_pattern and the like are
#: left out on purpose: '|/path' there makes the kernel run a program as root.
STRING_SYSCTLS = frozenset({
    "net.ipv4.tcp_congestion_control",
    "net.ipv4.tcp_allowed_congestion_control",
    "net.core.default_qdisc",
})
#: Kernel parameter names ('processor.max_cstate', 'vfio-pci.ids').
CMDLINE_KEY = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]{0,63}")
#: Kernel parameter values: no quotes, '$', backquote, '\\', spaces or shell operators (the
#: value lands in /etc/default/grub, which update-grub sources as shell).
CMDLINE_VALUE = re.compile(r"[A-Za-z0-9_.,:/=+\-@%~]{1,256}")
#: NVIDIA driver versions: '550.127.05', '535.216.03', '580.65'.
DRIVER_VERSION = re.compile(r"[0-9]{2,4}\.[0-9]{1,4}(?:\.[0-9]{1,4})?")
#: Debian policy 5.6.1: lowercase letters, digits, + - . ; at least two, starting alnum;
#: an optional ':arch' qualifier as dpkg prints it ('libcuda1:amd64').
PACKAGE_NAME = re.compile(r"[a-z0-9][a-z0-9+.\-]{1,127}(?::[a-z0-9][a-z0-9\-]{0,31})?")
HEX_ID = re.compile(r"[0-9a-f]{4}")
CLASS_ID = re.compile(r"[0-9a-f]{2}(?:[0-9a-f]{2})?")
#: Linux interface names: at most 15 bytes, no '/', no spaces.
IFACE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]{0,14}")
MAC_ADDRESS = re.compile(r"[0-9A-Fa-f]{2}(?::[0-9A-Fa-f]{2}){5}")
VLAN_TRUNKS = re.compile(r"[0-9]{1,4}(?:-[0-9]{1,4})?(?:;[0-9]{1,4}(?:-[0-9]{1,4})?)*")
FS_TYPES = re.compile(r"[a-z0-9]{1,16}(?:;[a-z0-9]{1,16}){0,15}")
#: A systemd time span of one number and one unit ('30s', '15min', '1h', '1d').
TIME_SPAN = re.compile(r"[1-9][0-9]{0,5}(?:s|min|h|d)")
#: An absolute directory of plain path characters (it lands in a unit file and a script).
ABSOLUTE_DIR = re.compile(r"(?:/[A-Za-z0-9_.\-]{1,64}){1,16}")
#: An absolute path of a .json file (a model's config.json; Hugging Face cache paths too).
JSON_FILE = re.compile(r"(?:/[A-Za-z0-9_.@+=\-]{1,128}){1,32}\.json")
#: The one text rule: every character some reader or writer of gpunode's files treats as a
#: line break or a control: C0 (NUL, \n \r \v \f, the \x1c-\x1e separators ...), DEL, C1
#: (\x85 NEL ...) and U+2028/U+2029, which are all of str.splitlines()'s separators.
FORBIDDEN_TEXT = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")
#: The old name of FORBIDDEN_TEXT, kept for the per-value checks that use it.
CONTROL = FORBIDDEN_TEXT
#: ASCII digits only: str.isdigit() and \d also take Arabic-Indic or full-width digits.
ASCII_INTEGER = re.compile(r"[0-9]{1,20}")

# A kernel release as `uname -r` prints it: numbers, then a local suffix after "-", "+" or "~"
# ("6.8.12-4-pve", "6.12.117+deb13-amd64", "7.0.0-3-pve", "6.12.57+deb13-cloud-amd64"). A bare
# "X.Y" (no third number, no suffix) is a meta package's series ("proxmox-kernel-6.17"), not a
# kernel. Anchored at both ends (\Z, not $: no trailing newline).
KERNEL_RELEASE = re.compile(
    r"\A\d+\.\d+(?:\.\d+)+(?:[-+~][0-9A-Za-z][0-9A-Za-z.+~-]*)?\Z"
    r"|\A\d+\.\d+(?:[-+~][0-9A-Za-z][0-9A-Za-z.+~-]*)\Z"
)
KERNEL_RELEASE_MAX = 64


def is_kernel_release(text: str) -> bool:
    """True for a kernel release such as '6.8.12-4-pve' or '6.12.117+deb13-amd64'."""
    return len(text) <= KERNEL_RELEASE_MAX and bool(KERNEL_RELEASE.match(text))


CpuGovernor = Literal[
    "performance", "powersave", "schedutil", "ondemand", "conservative", "userspace"
]
CPU_GOVERNORS: tuple[str, ...] = get_args(CpuGovernor)


def shown(value: object, limit: int = 60) -> str:
    """repr of a value, cut to `limit` characters (a pasted 4 KiB blob stays one line)."""
    text = repr(value)
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(str(value))} characters)"


def forbidden_text(value: object) -> tuple[str, str] | None:
    """(where, which) for the first line break or control character in value (a string, or
    the keys, items and values of lists and mappings inside it), None when there is none:
    ("item 2: ", "U+2028 at character 5 of '...'")."""
    if isinstance(value, str):
        bad = FORBIDDEN_TEXT.search(value)
        if bad:
            return "", f"U+{ord(bad.group()):04X} at character {bad.start() + 1} of {shown(value)}"
        return None
    if isinstance(value, dict):
        places: list[tuple[str, object]] = [
            (f"key {shown(key, 30)}: ", item) for key, item in value.items() for item in (key, item)
        ]
    elif isinstance(value, (list, tuple)):
        places = [(f"item {index}: ", item) for index, item in enumerate(value)]
    else:
        return None
    for where, item in places:
        inner = forbidden_text(item)
        if inner:
            return where + inner[0], inner[1]
    return None


def check_text(value: object) -> object:
    """The text rule as a pydantic before-validator: ValueError naming the character."""
    found = forbidden_text(value)
    if found:
        raise ValueError(
            f"{found[0]}holds a line break or control character ({found[1]}): give one line of "
            "printable text"
        )
    return value


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """"; did you mean 'x'?" for the closest choice (difflib), '' when none is close."""
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


def check(pattern: re.Pattern[str], value: object, what: str) -> str:
    """value if it is a string the pattern matches whole, else ValueError naming `what`."""
    if not isinstance(value, str) or not pattern.fullmatch(value):
        raise ValueError(f"{shown(value)} is not {what}")
    return value


def check_sysctl_value(key: str, value: str) -> str:
    """Integers (space separated) for most keys, words for the known string-valued ones."""
    text = " ".join(value.split())
    if key in STRING_SYSCTLS:
        return check(SYSCTL_WORDS, text, f"a value for {key}: words of letters, digits, _ -")
    if not SYSCTL_INTEGERS.fullmatch(text):
        raise ValueError(
            f"{key}: {shown(value)} is not a sysctl value: use an integer or integers "
            f"separated by spaces (string values only for {', '.join(sorted(STRING_SYSCTLS))})"
        )
    return text


def check_ip(value: str, version: int, what: str, cidr: bool) -> str:
    """An IPv4/IPv6 address (with /prefix when cidr) in Proxmox's net0 syntax."""
    try:
        parsed = (ipaddress.ip_interface if cidr else ipaddress.ip_address)(value)
    except ValueError:
        parsed = None
    if parsed is None or parsed.version != version or (cidr and "/" not in value):
        raise ValueError(f"{shown(value)} is not {what}")
    return value


def check_path(value: str, what: str, absolute: bool | None = None) -> str:
    """A normalised path: no '..', no '//', no trailing '/', no control characters, no
    spaces; absolute (True), relative (False) or either (None)."""
    bare = value.lstrip("/")
    normal = posixpath.normpath(bare) if bare else ""
    if (
        not bare
        or CONTROL.search(value)
        or normal != bare
        or normal.split("/")[0] == ".."
        or ".." in bare.split("/")
        or any(c.isspace() for c in value)
        or (absolute is not None and absolute != value.startswith("/"))
    ):
        kind = {True: "an absolute", False: "a relative", None: "a"}[absolute]
        raise ValueError(f"{shown(value)} is not {what}: use {kind} path without '..' or '//'")
    return value


#: A GPU power limit: watts (1-9999), 'default' or 'max'.
POWER_LIMIT = re.compile(r"default|max|[1-9][0-9]{0,3}")


def power_value(value: object) -> int | str:
    """One power limit: watts (1-9999) or 'default'/'max'."""
    text = str(value).strip().lower().removesuffix("w").strip()
    if isinstance(value, bool) or not POWER_LIMIT.fullmatch(text):
        raise ValueError(f"{shown(value)} is not a power limit: give watts such as 300, 'default' "
                         "or 'max'")
    return text if text in ("default", "max") else int(text)



def checked_power_limit(value: object, max_index: int) -> object:
    """gpu_power_limit: one power_value, or a mapping GPU index (ASCII digits) -> those."""
    if value is None:
        return None
    if not isinstance(value, dict):
        return power_value(value)
    out = {}
    for index, item in value.items():
        text = str(index)
        if isinstance(index, bool) or not ASCII_INTEGER.fullmatch(text) or int(text) > max_index:
            raise ValueError(f"{shown(index)} is not a GPU index (0..{max_index})")
        out[int(text)] = power_value(item)
    if not out:
        raise ValueError("give watts, 'default', 'max' or a mapping GPU index -> those")
    return out



#: Folders gpunode never writes a user-named file into: system configuration, boot, binaries,
#: kernel interfaces, root's home (its .ssh) and gpunode's own record.
SYSTEM_FOLDERS = ("/etc", "/boot", "/root", "/usr", "/bin", "/sbin", "/lib", "/lib32",
                  "/lib64", "/libx32", "/proc", "/sys", "/dev", "/var/lib/gpunode",
                  "/var/lib/dpkg", "/var/lib/apt", "/var/spool/cron", "/var/lib/systemd")
#: Where a user-named output may go: the working folder (reports/), and data folders.
OUTPUT_ROOTS = ("/var/lib", "/var/log", "/var/tmp", "/var/www", "/tmp", "/srv", "/opt",
                "/run", "/home", "/mnt", "/media", "/data")


def _under(path: str, roots: Iterable[str]) -> bool:
    return any(path == root or path.startswith(root.rstrip("/") + "/") for root in roots)


def check_output_path(value: object, what: str, base: str | None = None) -> str:
    """A path gpunode writes from user data, as an absolute normalised path: relative ones
    are taken from `base` (the working folder); no '..', no hidden folder (.ssh), not in a
    SYSTEM_FOLDERS folder, under OUTPUT_ROOTS or base; ValueError saying which rule."""
    if not isinstance(value, str) or not value or FORBIDDEN_TEXT.search(value):
        raise ValueError(f"{shown(value)} is not {what}: give a path")
    parts = value.split("/")
    if ".." in parts or any(p.startswith(".") and p not in ("", ".") for p in parts):
        raise ValueError(f"{shown(value)} is not {what}: no '..' and no hidden folder (.ssh)")
    folder = base or os.getcwd()
    path = posixpath.normpath(posixpath.join(folder, value))
    # The working folder counts as a root unless it is / or a system folder (root's home is
    # fine: its .ssh is hidden, refused above).
    roots = [*OUTPUT_ROOTS] + ([folder] if folder != "/" and not _under(
        folder, [f for f in SYSTEM_FOLDERS if f != "/root"]) else [])
    if _under(path, SYSTEM_FOLDERS) and not _under(path, roots[len(OUTPUT_ROOTS):]):
        raise ValueError(f"{shown(value)} is not {what}: {path} is in a system folder "
                         f"({', '.join(SYSTEM_FOLDERS)})")
    if not _under(path, roots):
        raise ValueError(f"{shown(value)} is not {what}: write under the working folder or "
                         f"one of {', '.join(OUTPUT_ROOTS)}")
    return path


class UserValues(BaseModel):
    """Base of every model a user fills in (profile, container, container settings): unknown
    keys are errors, values are frozen, and every field passes the one text rule
    (check_text) before its own checks."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    @field_validator("*", mode="before")
    @classmethod
    def _one_line_of_text(cls, value: object, info: ValidationInfo) -> object:
        annotation = cls.model_fields[info.field_name or ""].annotation
        if isinstance(annotation, type) and issubclass(annotation, UserValues):
            return value  # a nested model: its own fields are checked, by their names
        return check_text(value)
