"""Which installed packages belong to the NVIDIA driver release, by name.

The driver's own packages carry the driver's version ('550.127.05-1~deb12u1' of
nvidia-driver, nvidia-kernel-dkms, libcuda1, libnvidia-ml1, firmware-nvidia-gsp; cuda-drivers
in NVIDIA's CUDA repository; nvidia-utils-550 on Ubuntu). Other NVIDIA packages on the same
host have versions of their own and say nothing about the driver: the container toolkit
(nvidia-container-toolkit 1.17.x, libnvidia-container1), the CUDA toolkit (cuda-nvcc-12-2,
nvidia-cuda-toolkit), Debian's helper packages (nvidia-kernel-common 20151021+13,
nvidia-installer-cleanup, nvidia-settings, nvidia-persistenced, nvidia-modprobe), the EGL
platform libraries (libnvidia-egl-wayland1 1:1.1.9). Only the first kind decides whether the
installed driver is the pinned one, and only they are held.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

__all__ = ["DRIVER_RELEASE_PACKAGE", "driver_release_packages", "is_driver_release_package"]

DRIVER_RELEASE_PACKAGE = re.compile(
    # metapackages and the kernel modules (Debian, CUDA repository, Ubuntu names)
    r"nvidia-driver(?:-[a-z0-9.+-]+)?"
    r"|nvidia-(?:open-)?kernel-(?:open-)?(?:dkms|source|support)(?:-[0-9]+)?"
    r"|nvidia-kernel-open-[0-9]+|nvidia-kernel-common-[0-9]+(?:-server)?"
    r"|nvidia-open(?:-[0-9]+)?|nvidia-dkms-[0-9]+(?:-server)?(?:-open)?"
    r"|cuda-drivers(?:-[0-9]+)?(?:-fabricmanager(?:-[0-9]+)?)?"
    # user space of the same release
    r"|libcuda1|libnvcuvid1|libnvoptix1"
    r"|libnvidia-(?!container|egl-wayland|egl-gbm|egl-xcb|egl-xlib|egl-x11)[a-z0-9.+-]+"
    r"|lib(?:egl|gl1|gles|glx)-nvidia[a-z0-9.+-]*"
    r"|nvidia-smi|nvidia-alternative|nvidia-cuda-mps|nvidia-detect|nvidia-suspend-common"
    r"|nvidia-(?:egl|vulkan|opencl)-(?:common|icd)|nvidia-vdpau-driver"
    r"|nvidia-(?:compute-)?utils-[0-9]+(?:-server)?|nvidia-fabricmanager(?:-[0-9]+)?"
    r"|xserver-xorg-video-nvidia(?:-[0-9]+)?|firmware-nvidia-gsp(?:-[0-9]+)?"
)


def is_driver_release_package(name: str) -> bool:
    """True for a package whose version is the driver release's ('libcuda1', not
    'nvidia-container-toolkit'); an ':arch' qualifier is ignored."""
    return bool(DRIVER_RELEASE_PACKAGE.fullmatch(name.split(":", 1)[0]))


def driver_release_packages(installed: Mapping[str, str] | None) -> dict[str, str]:
    """The installed packages (name -> version) that belong to the driver release."""
    return {n: v for n, v in (installed or {}).items() if is_driver_release_package(n)}
