"""The NVIDIA apt pin, shared by the host's nvidia_driver role and the container role.

Which packages are NVIDIA's (dpkg-query / apt patterns) and the preferences file that pins
them all, dependencies included, to one driver version (templates/apt/90-gpunode-nvidia.pref.j2).
"""

from __future__ import annotations

from gpunode.ops.files import template_file

NVIDIA_PATTERNS = ["nvidia-*", "libnvidia-*", "libcuda1", "libnvcuvid1", "cuda-drivers*",
                   "firmware-nvidia-gsp*", "xserver-xorg-video-nvidia*"]
PREFERENCES_FILE = "/etc/apt/preferences.d/90-gpunode-nvidia.pref"


def nvidia_pin(version: str):
    """Add the owned_file operation that pins every NVIDIA package to version."""
    return template_file("apt/90-gpunode-nvidia.pref.j2", PREFERENCES_FILE,
                         version=version, patterns=NVIDIA_PATTERNS)
