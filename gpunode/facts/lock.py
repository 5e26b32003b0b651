"""One gpunode run at a time on a node: a lock under /run held for the whole run.

pyinfra runs each remote command in its own shell, so no shell can hold a lock for the run.
The run's first remote step (NodeLock: the first part of the run's one read, asked for by
every deploy that changes the node) takes `flock` on /run/gpunode/lock, writes
/run/gpunode/lock.owner (run id, controller host, user, pid, time) and starts a small holder
in the background that inherits the locked file and lives as long as the process the run's
commands come from (the SSH session's sshd, or pyinfra itself with @local); it removes the
owner line on the way out. So the lock is held exactly while the run's connection is up: a
finished, failed or killed run frees it within a second, a reboot clears /run, and nothing
has to be released by hand. A second run finds the flock taken (after waiting up to 60 s for
a run that just ended) and is refused before any change, told the owner line; the same run (a
second deploy) finds its own run id and goes on. A reboot in the run ends its SSH session and
so the lock; what the run does after it (reading back) takes none. GPUNODE_RUN_ID fixes the
run id (tests): runs that share one share the lock.

Where gpunode is not on the node (no /var/lib/gpunode: a --dry on a fresh node, or after
undo), the holder leaves nothing behind: once the run's connection is gone it unloads the
modules undo listed in /run/gpunode/unload (tcp_bbr: the run's own SSH connection used it
until then) and removes /run/gpunode, lock file included, while it still holds the lock. A run
waiting on that lock file then finds it replaced and takes the new one (the `-ef` check).
"""

from __future__ import annotations

import getpass
import os
import shlex
import socket
from datetime import datetime, timezone

from pyinfra.api import FactBase

from gpunode.facts.owned import STATE_DIR
from gpunode.facts.sections import FactModel
from gpunode.pyinfra_adapter import run_id

LOCK_DIR = "/run/gpunode"
LOCK_FILE = f"{LOCK_DIR}/lock"
OWNER_FILE = f"{LOCK_FILE}.owner"
#: Modules undo leaves for the holder to unload once the run's connection is gone.
UNLOAD_FILE = f"{LOCK_DIR}/unload"
#: Times a run takes a lock file that was removed under it (see the docstring) before it gives up.
LOCK_TRIES = 5
#: Seconds a run waits for the lock of a run that just ended (its holder sees the session go).
LOCK_WAIT_S = 60
#: The shells and wrappers between a remote command and the process that stands for the run.
_WRAPPERS = "sh|dash|bash|sudo|su|doas|env|timeout"


def owner_line(run: str) -> str:
    """Who holds the lock, as the owner file says it."""
    now = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    return (f"run={run} controller={socket.gethostname()} user={getpass.getuser()} "
            f"pid={os.getpid()} since={now}")


#: The holder: $1 the run's process, $2 the lock folder, $3 gpunode's state folder. Waits for
#: the run to end, removes the owner line; where gpunode is not on the node ($3 absent) unloads
#: what $2/unload lists (each tried for up to 10 s: its last sockets close) and removes $2.
HOLDER = (
    'while kill -0 "$1" 2>/dev/null; do sleep 1; done; rm -f "$2/lock.owner"; '
    '[ -e "$3" ] && exit 0; '
    'for m in $(cat "$2/unload" 2>/dev/null); do i=0; '
    'while [ -e "/sys/module/$m/refcnt" ] && [ "$i" -lt 10 ]; do '
    'modprobe -r "$m" 2>/dev/null || sleep 1; i=$((i + 1)); done; done; '
    'rm -rf -- "$2"'
)


def lock_command(run: str, owner: str) -> str:
    """Shell: take the node lock for this run (see the module docstring); prints one line,
    'gpunode-lock: taken|ours' or 'gpunode-lock: held: OWNER LINE'. It runs in a subshell of
    its own (it ends with `exit`) and starts four processes when the lock is free: flock,
    the holder (setsid, then its shell) and nothing else: the owner checks are shell builtins.

    The lock is the open file on fd 9: `flock 9` locks it, and the holder, started in the
    background, inherits fd 9 and so keeps the lock after this shell ends, until it sees the
    run's process go (it removes the owner line first, while it still holds the lock)."""
    d, q_run, q_owner = shlex.quote(LOCK_DIR), shlex.quote(f"run={run} "), shlex.quote(owner)
    return "\n".join([
        f"( d={d}; tries=0",
        "owner() { o=; read -r o 2>/dev/null < \"$d/lock.owner\"; "
        "o=${o:-unknown (no owner file)}; }",
        "while :; do",
        "[ -d \"$d\" ] || { mkdir -p \"$d\" && chmod 700 \"$d\"; } || exit 2",
        f"owner; case \"$o\" in {q_run}*) mine=1;; *) mine=;; esac",
        "exec 9>>\"$d/lock\"",
        "if [ -n \"$mine\" ] && ! flock -n 9; then echo 'gpunode-lock: ours'; exit 0; fi",
        # A run that just ended frees the lock within a second or two of its connection closing
        # (a slow guest: longer), so a run that follows at once waits a little for it.
        f"if ! flock -w {int(LOCK_WAIT_S)} 9; then owner; echo \"gpunode-lock: held: $o\"; "
        "exit 0; fi",
        # The lock file may have been removed while this run waited (see the docstring).
        "[ /proc/self/fd/9 -ef \"$d/lock\" ] && break",
        f"exec 9>&-; tries=$((tries + 1)); [ \"$tries\" -lt {LOCK_TRIES} ] || "
        "{ echo 'gpunode-lock: held: unknown (the lock file kept being replaced)'; exit 0; }",
        "done",
        "watch=$PPID",
        "while [ \"$watch\" -gt 1 ]; do c=; read -r c 2>/dev/null < /proc/$watch/comm; "
        "case \"$c\" in "
        f"{_WRAPPERS}) read -r _ _ _ watch _ < /proc/$watch/stat;; "
        "*) break;; esac; done",
        f"printf '%s\\n' {q_owner} > \"$d/lock.owner\" || exit 2",
        f"setsid sh -c {shlex.quote(HOLDER)} gpunode-lock \"$watch\" \"$d\" "
        f"{shlex.quote(STATE_DIR)} "
        "</dev/null >/dev/null 2>&1 &",
        "echo 'gpunode-lock: taken' )",
    ])


def lock_refusal(output: str) -> str | None:
    """The refusal for lock_command's output, None when this run holds the lock."""
    line = next((ln for ln in output.splitlines() if ln.startswith("gpunode-lock: ")), "")
    state = line.removeprefix("gpunode-lock: ")
    if state in ("taken", "ours"):
        return None
    holder = state.removeprefix("held: ") if state.startswith("held: ") else "unknown"
    return (f"another gpunode run holds {LOCK_FILE} ({holder}): wait for it to finish and run "
            "again; the lock goes when that run's connection closes (or at reboot)")


class LockState(FactModel):
    """What taking the lock gave: None = this run holds it, else the refusal."""

    refusal: str | None = None


class NodeLock(FactBase):
    """Take the node lock for this run (the first part of the run's one read, see
    gpunode.facts.snapshot): its LockState."""

    def command(self) -> str:
        return lock_command(run_id(), owner_line(run_id()))

    def process(self, output: list[str]) -> LockState:
        return LockState(refusal=lock_refusal("\n".join(output)))
