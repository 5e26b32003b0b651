"""The lab's base disk image: built by build_image.sh, cached keyed on a hash of that script."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from lab.progress import DebootstrapStages, Heartbeat, follow_file, stream_lines

BUILD_SCRIPT = Path(__file__).with_name("build_image.sh")
CACHE_ENV = "GPUNODE_LAB_CACHE"
SUITE_ENV = "GPUNODE_LAB_SUITE"
SUITES = ("trixie", "bookworm")  # Debian 13 (Proxmox VE 9, the default), Debian 12 (VE 8)
HOST_TOOLS = ("qemu-system-x86_64", "qemu-img")
WORK_PREFIX = "gpunode-lab-build."  # build_image.sh: WORK=$(mktemp -d .../gpunode-lab-build.XXXXXX)


class LabImageError(RuntimeError):
    """The image could not be built or the host tools could not be installed."""


def cache_dir() -> Path:
    """Root of the lab cache: $GPUNODE_LAB_CACHE or ~/.cache/gpunode/lab."""
    env = os.environ.get(CACHE_ENV)
    return Path(env) if env else Path.home() / ".cache" / "gpunode" / "lab"


def lab_suite() -> str:
    """The Debian suite of the lab guest: $GPUNODE_LAB_SUITE (trixie | bookworm), default trixie."""
    suite = os.environ.get(SUITE_ENV, SUITES[0]) or SUITES[0]
    if suite not in SUITES:
        raise LabImageError(f"{SUITE_ENV}={suite!r}: use one of {', '.join(SUITES)}")
    return suite


def image_key(suite: str | None = None) -> str:
    """Cache key: the suite, then the first 16 hex digits of the build script's sha256."""
    digest = hashlib.sha256(BUILD_SCRIPT.read_bytes()).hexdigest()[:16]
    return f"{suite or lab_suite()}-{digest}"


@dataclass(frozen=True)
class LabImage:
    """A built image folder (see build_image.sh for what each file is)."""

    path: Path

    @property
    def base(self) -> Path:
        return self.path / "base.qcow2"

    @property
    def client_key(self) -> Path:
        return self.path / "id_ed25519"

    @property
    def host_key_pub(self) -> Path:
        return self.path / "ssh_host_ed25519_key.pub"

    @property
    def kernel(self) -> Path:
        return self.path / "vmlinuz"

    @property
    def probe_initrd(self) -> Path:
        return self.path / "probe-initrd.gz"

    def info(self) -> dict:
        """build.json: kernel version, timings (s) and sizes (MB) of the build."""
        return json.loads((self.path / "build.json").read_text())

    def complete(self) -> bool:
        files = (self.base, self.client_key, self.host_key_pub, self.path / "build.json")
        return all(f.is_file() for f in files)


def current_image() -> LabImage:
    """The image folder for the current build script (it may not be built yet)."""
    return LabImage(cache_dir() / "images" / image_key())


def ensure_host_tools() -> None:
    """Install QEMU and the build tools with apt-get when any is missing (needs root)."""
    if all(shutil.which(tool) for tool in HOST_TOOLS):
        return
    _run_script(["--deps"], cache_dir() / "deps.log")
    missing = [tool for tool in HOST_TOOLS if not shutil.which(tool)]
    if missing:
        raise LabImageError(f"still missing after install: {', '.join(missing)}")


def ensure_image(rebuild: bool = False) -> LabImage:
    """Return the cached image for this build script, building it first when needed."""
    image = current_image()
    if image.complete() and not rebuild:
        return image
    image.path.parent.mkdir(parents=True, exist_ok=True)
    with _build_lock(image.path.parent / ".build.lock"):
        if image.complete() and not rebuild:
            return image  # another process built it while we waited
        _build(image)
    return image


def _build(image: LabImage) -> None:
    if os.geteuid() != 0:
        raise LabImageError("building the lab image needs root (debootstrap, chroot)")
    tmp = image.path.with_name(f"{image.path.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    log = image.path.with_name(f"{image.path.name}.build.log")
    started = time.monotonic()
    suite = image.path.name.split("-", 1)[0]
    env = {"GPUNODE_LAB_DEB_CACHE": str(cache_dir() / "debs" / suite), SUITE_ENV: suite}
    _run_script([str(tmp)], log, env=env)
    shutil.rmtree(image.path, ignore_errors=True)
    tmp.rename(image.path)
    _prune_old_images(image)
    print(f"lab image built in {time.monotonic() - started:.0f} s: {image.path}", flush=True)


def _run_script(args: list[str], log: Path, env: dict[str, str] | None = None) -> None:
    """Run build_image.sh: every line to log, its `[lab-build ...]` lines and debootstrap's
    stages to the terminal, a heartbeat while it is silent; on failure the log's tail and path."""
    log.parent.mkdir(parents=True, exist_ok=True)
    what = "installing the lab's host tools" if args == ["--deps"] else "building the lab image"
    print(f"lab: {what} (full log: {log})", flush=True)
    full_env = {**os.environ, **(env or {})}
    stop = threading.Event()
    with log.open("w") as out, Heartbeat(what) as beat:
        stages = DebootstrapStages()

        def show_stage(line: str) -> None:
            text = stages.feed(line)
            if text:
                beat.say(f"  [lab-build] debootstrap: {text}", what=f"debootstrap: {text}")

        # build_image.sh keeps debootstrap's own log in its work dir; builds are serialized by
        # the image lock, so the newest such log is this build's.
        follower = threading.Thread(target=follow_file, daemon=True, args=(
            f"{WORK_PREFIX}*/debootstrap.log", Path(full_env.get("TMPDIR") or "/var/tmp"),
            time.time() - 1, stop, show_stage))
        follower.start()
        proc = subprocess.Popen(
            ["bash", str(BUILD_SCRIPT), *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=full_env,
            text=True,
            errors="replace",
        )
        assert proc.stdout is not None
        stream_lines(proc.stdout, out, beat, _shown_build_line)
        returncode = proc.wait()
        stop.set()
        follower.join(timeout=5)
    if returncode != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-40:])
        raise LabImageError(f"build_image.sh {' '.join(args)} failed (log {log}):\n{tail}")


def _shown_build_line(line: str) -> str | None:
    """The build script's own progress lines; everything else stays in the log."""
    return f"  {line}" if line.startswith("[lab-build") else None


def _prune_old_images(keep: LabImage) -> None:
    """Remove this suite's images and logs of older build scripts (never another suite's; a
    running VM keeps its open base file)."""
    suite_prefix = keep.path.name.split("-", 1)[0] + "-"
    for entry in keep.path.parent.iterdir():
        if entry.name.startswith((keep.path.name, ".")) or not entry.name.startswith(suite_prefix):
            continue
        if entry.is_dir():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            entry.unlink(missing_ok=True)


@contextmanager
def _build_lock(path: Path) -> Iterator[None]:
    with path.open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
