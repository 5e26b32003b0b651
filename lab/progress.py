"""Progress for the lab's long steps: nothing that can take more than ~10 s stays silent.

`Heartbeat` prints "  ... WHAT (N s)" whenever WHAT ran for `every` seconds without printing
anything: on a terminal as one line that updates in place, elsewhere (CI logs) as a new line.
`stream_lines` copies a child's output to a log file and shows the lines a person reads.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import IO, TextIO


def elapsed(seconds: float) -> str:
    """'42 s' or '3 min 05 s'."""
    seconds = int(seconds)
    return f"{seconds} s" if seconds < 60 else f"{seconds // 60} min {seconds % 60:02d} s"


class Heartbeat:
    """A background line that says what is still running when nothing else was printed."""

    def __init__(self, what: str, every: float = 15.0, stream: TextIO | None = None) -> None:
        self.what = what
        self.every = every
        self.stream = stream or sys.stdout
        self.started = time.monotonic()
        self._last = self.started
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._pending_cr = False
        self._lock = threading.Lock()

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=2)
        self._clear()

    def say(self, line: str, what: str | None = None) -> None:
        """Print a line of real output (it resets the silence timer)."""
        with self._lock:
            self._clear_locked()
            print(line, file=self.stream, flush=True)
            self._last = time.monotonic()
            if what:
                self.what = what

    def _run(self) -> None:
        while not self._stop.wait(1.0):
            now = time.monotonic()
            if now - self._last < self.every:
                continue
            with self._lock:
                text = f"  ... {self.what} ({elapsed(now - self.started)})"
                if self.stream.isatty():
                    self.stream.write(f"\r\033[K{text}")
                    self._pending_cr = True
                    self._last = now - self.every + 1.0  # refresh the same line each second
                else:
                    self.stream.write(text + "\n")
                    self._last = now
                self.stream.flush()

    def _clear(self) -> None:
        with self._lock:
            self._clear_locked()

    def _clear_locked(self) -> None:
        if self._pending_cr:
            self.stream.write("\r\033[K")
            self._pending_cr = False


def stream_lines(
    lines: Iterable[str], log: IO[str], beat: Heartbeat, show: Callable[[str], str | None],
    relabel: bool = True,
) -> None:
    """Write every line to log; print show(line) when it returns text. With relabel, a shown
    line (after its "[tag] " prefix) becomes what the heartbeat says is running."""
    for line in lines:
        log.write(line)
        log.flush()
        shown = show(line.rstrip("\n"))
        if shown:
            beat.say(shown, what=shown.split("] ", 1)[-1].strip() if relabel else None)


class DebootstrapStages:
    """debootstrap's "I: Verb ..." lines -> the first line of each stage, then every `every`th
    line of it (one per package would be about a thousand lines)."""

    def __init__(self, every: int = 40) -> None:
        self.every = every
        self.verb = ""
        self.count = 0

    def feed(self, line: str) -> str | None:
        if not line.startswith("I: "):
            return None
        text = line[3:].strip()
        verb = text.split(" ", 1)[0]
        if verb != self.verb:
            self.verb, self.count = verb, 0
            return text
        self.count += 1
        return f"{text} ({self.count} so far)" if self.count % self.every == 0 else None


def follow_file(pattern: str, base: Path, newer_than: float, stop: threading.Event,
                emit: Callable[[str], None]) -> None:
    """Wait for a file matching base/pattern modified after newer_than (wall time), then pass
    each complete line it grows to emit, until stop is set (a thread's target)."""
    handle = None
    pending = ""
    while not stop.wait(1.0):
        if handle is None:
            found = [p for p in base.glob(pattern) if _mtime(p) >= newer_than]
            if not found:
                continue
            handle = max(found, key=_mtime).open(errors="replace")
        chunk = handle.read()
        if not chunk:
            continue
        pending += chunk
        *lines, pending = pending.split("\n")
        for line in lines:
            emit(line)
    if handle is not None:
        handle.close()


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0
