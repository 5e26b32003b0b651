"""Paths of the captured outputs used by these tests (see tests/data/SOURCES.md)."""

from pathlib import Path

DATA = Path(__file__).resolve().parents[2] / "data"


def read(relative: str) -> str:
    return (DATA / relative).read_text(encoding="utf-8")
