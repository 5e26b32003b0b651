"""Paths to the captured test data in tests/data/lxc (see SOURCES.md there)."""

from pathlib import Path

DATA = Path(__file__).resolve().parents[2] / "data" / "lxc"


def read(name: str) -> str:
    # newline="" keeps the bytes exactly as they are on disk.
    with open(DATA / name, encoding="utf-8", newline="") as handle:
        return handle.read()


REAL_CONFIGS = [
    "pve-container-rollback-105.conf",
    "pve-container-delete-106.conf",
    "pupman-idmap-snapshot-100.conf",
    "frigate-7640-102.conf",
    "helper-scripts-frigate-100.conf",
]
ALL_CONFIGS = sorted(p.name for p in DATA.glob("*.conf"))
