"""The lab's progress output: debootstrap's stages and a file followed as it grows.

The debootstrap lines use the message formats of debootstrap 1.0.128 (Debian 12's package,
/usr/share/debootstrap/functions: RETRIEVING "Retrieving %s %s", VALIDATING "Validating %s %s",
EXTRACTING "Extracting %s...", INSTCORE, UNPACKREQ, CONFREQ, BASESUCCESS).
"""

from __future__ import annotations

import io
import threading
import time

from lab.progress import DebootstrapStages, Heartbeat, elapsed, follow_file

LOG = """I: Retrieving InRelease
I: Checking Release signature
I: Valid Release signature (key id B8E5F13176D2A7A75220028078DBA3BC47EF2265)
I: Retrieving Packages
I: Validating Packages
I: Resolving dependencies of required packages...
I: Resolving dependencies of base packages...
I: Checking component main on http://deb.debian.org/debian...
""" + "".join(f"I: Retrieving pkg{i} 1.{i}\n" for i in range(85)) + """\
I: Chosen extractor for .deb packages: dpkg-deb
I: Extracting adduser...
I: Installing core packages...
W: some warning
I: Unpacking required packages...
I: Configuring required packages...
I: Base system installed successfully.
"""


def test_debootstrap_stages_are_few_lines():
    stages = DebootstrapStages(every=40)
    shown = [text for line in LOG.splitlines() if (text := stages.feed(line))]
    assert shown[:3] == [
        "Retrieving InRelease", "Checking Release signature",
        "Valid Release signature (key id B8E5F13176D2A7A75220028078DBA3BC47EF2265)"]
    retrieving = [s for s in shown if s.startswith("Retrieving pkg")]
    assert retrieving == ["Retrieving pkg0 1.0", "Retrieving pkg40 1.40 (40 so far)",
                          "Retrieving pkg80 1.80 (80 so far)"]
    assert shown[-1] == "Base system installed successfully."
    assert not any("warning" in s for s in shown)
    assert len(shown) < 25


def test_follow_file_reads_complete_lines_of_the_newest_match(tmp_path):
    got: list[str] = []
    stop = threading.Event()
    work = tmp_path / "gpunode-lab-build.abc"
    thread = threading.Thread(target=follow_file, args=(
        "gpunode-lab-build.*/debootstrap.log", tmp_path, time.time() - 1, stop, got.append))
    thread.start()
    work.mkdir()
    log = work / "debootstrap.log"
    with log.open("w") as out:
        out.write("I: Retrieving InRelease\nI: Check")
        out.flush()
        time.sleep(2.5)
        out.write("ing Release signature\n")
    time.sleep(2.5)
    stop.set()
    thread.join(timeout=5)
    assert got == ["I: Retrieving InRelease", "I: Checking Release signature"]


def test_heartbeat_speaks_only_when_silent():
    stream = io.StringIO()
    with Heartbeat("building", every=1.0, stream=stream) as beat:
        beat.say("first line")
        time.sleep(2.6)
    lines = stream.getvalue().splitlines()
    assert lines[0] == "first line"
    assert lines[1].startswith("  ... building (") and len(lines) >= 2
    assert elapsed(42) == "42 s" and elapsed(185) == "3 min 05 s"
