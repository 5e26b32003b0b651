"""Run the real pyinfra CLI against the lab inventory and read its JSON output."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
LAB_INVENTORY = "inventories/lab.py"
CHANGE_MARK = "] change: "


@dataclass
class PyinfraRun:
    """One CLI run: exit status, the JSON payload (plan and results) and the log (stderr)."""

    returncode: int
    payload: dict
    log: str

    def _checked(self) -> dict:
        """The JSON payload, or an AssertionError when the run failed before printing one:
        when every host fails, pyinfra prints nothing on stdout, which must not read as
        'no changes'."""
        if self.returncode != 0 and "plan" not in self.payload:
            raise AssertionError(
                f"pyinfra exited {self.returncode} without a JSON result:\n{self.log[-3000:]}"
            )
        return self.payload

    def planned_changes(self) -> list[str]:
        """Operation names with a change in the plan (what --dry says will change)."""
        return [op["name"] for op in self._checked().get("plan", []) if op["hosts_with_change"]]

    def changed(self) -> list[str]:
        """Operation names that changed something in a real run."""
        results = self._checked().get("results") or {}
        return [op["name"] for op in results.get("operations", []) if op["success"]]

    def change_lines(self) -> list[str]:
        """The value-level change lines gpunode logged ('[host] change: setting old -> new
        (where)'), without the prefix, in order, each once."""
        return change_lines(self.log)

    def wide_lines(self) -> list[str]:
        """The log's lines past 100 columns (colour codes not counted)."""
        return wide_lines(self.log)

    def loaded_facts(self) -> list[str]:
        return loaded_facts(self.log)

    def errors(self) -> list[str]:
        results = self._checked().get("results") or {}
        return [op["name"] for op in results.get("operations", []) if op["error"]]


def change_lines(log: str) -> list[str]:
    """Lines logged by gpunode.ops.changes.report_change, prefix removed, the lines it
    wrapped past 100 columns (indented under the change, a '(where)' last) joined back, each
    once, in order."""
    lines: list[str] = []
    joinable = False
    for line in log.splitlines():
        text = line.strip()
        if text.startswith("[") and CHANGE_MARK in text:
            lines.append(text.split(CHANGE_MARK, 1)[1])
            joinable = True
        elif joinable and line.startswith(" " * 9) and text and not text.startswith("["):
            lines[-1] = f"{lines[-1]} {text}"
            joinable = not text.startswith("(")
        else:
            joinable = False
    return list(dict.fromkeys(lines))


def wide_lines(log: str) -> list[str]:
    """Lines of log wider than 100 columns once ANSI colour codes are taken out."""
    plain = re.sub(r"\x1b\[[0-9;]*m", "", log)
    return [line for line in plain.splitlines() if len(line) > 100]


def loaded_facts(log: str) -> list[str]:
    """Facts read, in order (the "Loaded fact" lines of a pyinfra run with -v)."""
    return [line.split("Loaded fact ", 1)[1].split(" (")[0]
            for line in log.splitlines() if "Loaded fact " in line]


def pyinfra_bin() -> str:
    candidate = Path(sys.executable).with_name("pyinfra")
    return str(candidate) if candidate.exists() else "pyinfra"


def run_pyinfra(
    deploy: str, *args: str, env: dict[str, str] | None = None, timeout: float = 1800,
    inventory: str = LAB_INVENTORY, pyinfra: str | None = None, cwd: Path = REPO,
) -> PyinfraRun:
    """`pyinfra <inventory> <deploy> <args> --json` from the repository root (or cwd, with
    another pyinfra executable: a wheel's virtual environment)."""
    command = [pyinfra or pyinfra_bin(), inventory, deploy, *args, "--json"]
    proc = subprocess.run(
        command, cwd=cwd, capture_output=True, text=True, timeout=timeout,
        env={**os.environ, **(env or {})}, stdin=subprocess.DEVNULL,
    )
    try:
        payload = json.loads(proc.stdout) if proc.stdout.strip() else {}
    except json.JSONDecodeError:
        payload = {"raw_stdout": proc.stdout}
    return PyinfraRun(proc.returncode, payload, proc.stderr)
