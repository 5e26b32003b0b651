"""Crash sweep: cut the lab node's power at N points across a first converge and across an
undo, boot it again, and check what a power cut must never do (issue #42).

    python bench/crash_sweep.py --suite trixie --cuts 4 --undo-cuts 3
    python bench/crash_sweep.py --suite bookworm --cuts 3 --undo-cuts 2 --out results.json

Not a test: a script (minutes a cut on this 2-core machine, TCG guest). It boots its own lab VM
(run dir <lab cache>/run-crash-sweep) and:

1. Reference: a fresh guest; the files gpunode writes or edits (tests/lab/node_snapshot.PATHS,
   /boot/grub/grub.cfg) hashed before; `deploy/site.py -y` timed (T) and the files hashed after
   (the converged content); the converged disk kept (synced, then the power cut: its journal
   replays on the next boot) as the base of the undo cuts; `deploy/undo.py -y` timed (U).
2. Each converge cut i of N: a fresh guest, site.py started, the power cut (QEMU killed,
   `python -m lab power-cut`) at T*(i+1)/(N+1), the same disk booted (`python -m lab boot`).
   Checked: it boots to SSH; each file is whole, either as before or as converged (no half
   file in force); every original gpunode kept is byte-identical to the file before gpunode
   first ran (or marked absent where there was none; a temporary the cut left beside one is
   not an original); site.py again converges (exit 0) and leaves no temporary (`*.gpunode-copy`,
   `*.gpunode-new.*`) beside a watched file or among the originals; a further run changes
   nothing.
3. Each undo cut j of M: a fresh overlay of the converged disk, undo.py started, the power cut
   at U*(j+1)/(M+1), boot. Checked: boots; each file converged or as before, whole; undo again
   succeeds, leaving no temporary; the files are then exactly as before gpunode,
   /var/lib/gpunode gone; a further undo changes nothing.

Prints one line a cut and the figure ("N/N cuts: booted, converged, originals exact"), and
writes the JSON to --out (default bench/results/crash-sweep-<suite>-<date>.json).
"""

from __future__ import annotations

import argparse
import json
import shlex
import shutil
import subprocess
import sys
import time
from datetime import date
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchlib import own_lab_vm  # noqa: E402

from gpunode.facts.owned import ABSENT_SUFFIX, STATE_DIR, original_path  # noqa: E402
from gpunode.ops.files import COPY_SUFFIX, NEW_INFIX  # noqa: E402
from lab.vm import LabVM  # noqa: E402
from tests.lab.node_snapshot import PATHS  # noqa: E402
from tests.lab.pyinfra_cli import LAB_INVENTORY, pyinfra_bin, run_pyinfra  # noqa: E402

SITE, UNDO = "deploy/site.py", "deploy/undo.py"
GRUB_CFG = "/boot/grub/grub.cfg"
ORIGINALS = original_path("").rstrip("/")
BOOT_TIMEOUT_S = 900.0


def hashes(vm: LabVM, paths: list[str]) -> dict[str, str]:
    """path -> sha256 of a file, 'absent', or 'dir' for a folder."""
    lines = "; ".join(
        f"p={shlex.quote(p)}; if [ -f \"$p\" ]; then "
        f"echo \"$p $(sha256sum < \"$p\" | cut -c1-64)\"; "
        f"elif [ -d \"$p\" ]; then echo \"$p dir\"; else echo \"$p absent\"; fi" for p in paths)
    rc, out, err = vm.ssh(lines, timeout=120)
    if rc != 0:
        raise RuntimeError(f"hashing failed: {err}")
    return dict(line.rsplit(" ", 1) for line in out.splitlines())


def kept_originals(vm: LabVM) -> dict[str, str]:
    """The originals gpunode kept: path -> sha256, or 'absent' for an absent marker."""
    listing = f"[ -d {ORIGINALS} ] && cd {ORIGINALS} && find . -type f | sort"
    rc, out, _ = vm.ssh(listing, timeout=60)
    kept: dict[str, str] = {}
    files = [line[1:] for line in out.splitlines()
             if line.startswith("./") and not is_temporary(line)] if rc == 0 else []
    real = [f for f in files if not f.endswith(ABSENT_SUFFIX)]
    found = hashes(vm, [ORIGINALS + f for f in real]) if real else {}
    for f in files:
        if f.endswith(ABSENT_SUFFIX):
            kept[f[: -len(ABSENT_SUFFIX)]] = "absent"
        else:
            kept[f] = found[ORIGINALS + f]
    return kept


def is_temporary(name: str) -> bool:
    """A checked copy or a new file's temporary (a cut can leave one; the next write of that
    path overwrites it: it is never read as an original)."""
    return name.endswith(COPY_SUFFIX) or NEW_INFIX in name


def temporaries_left(vm: LabVM, paths: list[str]) -> list[str]:
    """Temporaries beside the watched files or among the originals."""
    folders = sorted({p.rsplit("/", 1)[0] or "/" for p in paths})
    find = " ".join(shlex.quote(f) for f in folders)
    rc, out, _ = vm.ssh(f"find {find} -maxdepth 1 \\( -name '*{COPY_SUFFIX}' -o "
                        f"-name '*{NEW_INFIX}*' \\) 2>/dev/null; "
                        f"[ -d {ORIGINALS} ] && find {ORIGINALS} -name '*{COPY_SUFFIX}' "
                        f"-o -name '*{NEW_INFIX}*'; true", timeout=60)
    return sorted(set(out.split())) if rc == 0 else ["(find failed)"]


def start_fresh(vm: LabVM, base: Path | None = None) -> None:
    vm.start(base=base)
    vm.wait_ssh(timeout=BOOT_TIMEOUT_S)


def cut_during(vm: LabVM, deploy: str, after_s: float, log: Path) -> str:
    """Start `pyinfra lab deploy -y`, cut the guest's power after after_s, boot it again;
    return the last line pyinfra had printed."""
    with log.open("w") as out:
        proc = subprocess.Popen([pyinfra_bin(), LAB_INVENTORY, deploy, "-y", "-v"], cwd=REPO,
                                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        time.sleep(after_s)
        finished = proc.poll() is not None
        vm.power_cut()
        proc.kill()
        proc.wait()
    lines = [line for line in log.read_text(errors="replace").splitlines() if line.strip()]
    last = (lines[-1] if lines else "(nothing printed)")[-160:]
    return ("(the run had finished) " if finished else "") + last


def check_whole(now: dict[str, str], allowed: list[dict[str, str]]) -> list[str]:
    """Files whose content is none of the allowed states (a half file, or a wrong one)."""
    return [f"{p}: {now[p]}" for p in now if all(now[p] != a.get(p) for a in allowed)]


def check_originals(kept: dict[str, str], before: dict[str, str]) -> list[str]:
    """Originals that are not the file as it was before gpunode first ran."""
    return [f"{p}: kept {kept[p][:12]}, before {before.get(p, '?')[:12]}" for p in kept
            if before.get(p, "?") != kept[p]]


def cut_and_boot(vm: LabVM, kind: str, deploy: str, at: float, ref: dict, log: Path,
                 base: Path | None = None) -> dict:
    """Cut the power at `at` seconds into `deploy`, boot again, and check every file is whole
    and every kept original is the file as it was; result["booted"] says whether it booted."""
    start_fresh(vm, base=base)
    last = cut_during(vm, deploy, at, log)
    result: dict = {"kind": kind, "cut_at_s": round(at, 1), "last_line": last}
    try:
        vm.boot()
        result["boot_to_ssh_s"] = round(vm.wait_ssh(timeout=BOOT_TIMEOUT_S), 1)
    except Exception as exc:  # noqa: BLE001 - the figure says what failed
        return {**result, "booted": False, "error": str(exc)[-400:]}
    result["booted"] = True
    now = hashes(vm, ref["paths"])
    result["not_whole"] = check_whole(now, [ref["before"], ref["after"]])
    result["originals_wrong"] = check_originals(kept_originals(vm), ref["before"])
    return result


def run_again(deploy: str, result: dict, done_key: str) -> None:
    """Run `deploy` again to its end; result[done_key] says whether it succeeded."""
    again = run_pyinfra(deploy, "-y")
    result[done_key] = again.returncode == 0
    if not result[done_key]:
        result["error"] = again.log[-1500:]


def further_changes(deploy: str) -> list[str]:
    """What one more run of `deploy` changed (nothing, on a converged node)."""
    further = run_pyinfra(deploy, "-y")
    return further.changed() if further.returncode == 0 else ["(failed)"]


def deploy_cut(vm: LabVM, i: int, at: float, ref: dict, logs: Path) -> dict:
    result = cut_and_boot(vm, "converge", SITE, at, ref, logs / f"cut-{i}.log")
    if not result["booted"]:
        return result
    run_again(SITE, result, "converged")
    result["temporaries_left"] = temporaries_left(vm, ref["paths"])
    result["further_changes"] = further_changes(SITE)
    result["ok"] = bool(result["converged"] and not result["not_whole"]
                        and not result["originals_wrong"] and not result["temporaries_left"]
                        and not result["further_changes"])
    return result


def undo_cut(vm: LabVM, j: int, at: float, ref: dict, logs: Path) -> dict:
    result = cut_and_boot(vm, "undo", UNDO, at, ref, logs / f"undo-cut-{j}.log",
                          base=ref["converged_disk"])
    if not result["booted"]:
        return result
    run_again(UNDO, result, "undone")
    result["temporaries_left"] = temporaries_left(vm, ref["paths"])
    final = hashes(vm, ref["paths"])
    result["not_as_before"] = [f"{p}: {final[p]} (before {ref['before'][p]})" for p in final
                               if final[p] != ref["before"][p] and p != GRUB_CFG]
    result["further_changes"] = further_changes(UNDO)
    result["ok"] = bool(result["undone"] and not result["not_whole"]
                        and not result["originals_wrong"] and not result["not_as_before"]
                        and not result["temporaries_left"] and not result["further_changes"])
    return result


def reference(vm: LabVM, work: Path) -> dict:
    """The fresh guest's files, the converged ones, T, U and the converged disk."""
    start_fresh(vm)
    started = time.monotonic()
    first = run_pyinfra(SITE, "-y")
    converge_s = time.monotonic() - started
    if first.returncode != 0:
        raise SystemExit(f"the reference converge failed:\n{first.log[-3000:]}")
    kept = kept_originals(vm)
    paths = sorted({*PATHS, GRUB_CFG, STATE_DIR, *kept})
    after = hashes(vm, paths)
    vm.ssh("sync", timeout=120)
    vm.power_cut()
    disk = work / "converged.qcow2"
    shutil.move(str(vm.run_dir / "disk.qcow2"), disk)
    # The converged disk again, to time undo and read the files as they were before gpunode.
    start_fresh(vm, base=disk)
    started = time.monotonic()
    undo = run_pyinfra(UNDO, "-y")
    undo_s = time.monotonic() - started
    if undo.returncode != 0:
        raise SystemExit(f"the reference undo failed:\n{undo.log[-3000:]}")
    vm.stop()
    start_fresh(vm)
    before = hashes(vm, paths)
    vm.stop()
    # What the originals hold on the converged disk must be what the fresh guest had.
    wrong = check_originals(kept, before)
    if wrong:
        raise SystemExit(f"the reference converge kept wrong originals: {wrong}")
    return {"paths": paths, "before": before, "after": after, "converge_s": converge_s,
            "undo_s": undo_s, "converged_disk": disk}


def figure(results: list[dict], kind: str) -> str:
    mine = [r for r in results if r["kind"] == kind]
    ok = sum(1 for r in mine if r.get("ok"))
    what = "booted, converged, originals exact" if kind == "converge" else (
        "booted, undone to the fresh files, originals exact")
    return f"{ok}/{len(mine)} {kind} cuts: {what}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--suite", choices=("trixie", "bookworm"), default="trixie")
    parser.add_argument("--cuts", type=int, default=4, help="cuts across a first converge")
    parser.add_argument("--undo-cuts", type=int, default=3, help="cuts across an undo")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    vm, work = own_lab_vm(args.suite, "crash-sweep")
    (work / "logs").mkdir(parents=True)
    started = time.monotonic()
    results: list[dict] = []
    try:
        ref = reference(vm, work)
        print(f"reference: converge {ref['converge_s']:.0f} s, undo {ref['undo_s']:.0f} s, "
              f"{len(ref['paths'])} files watched", flush=True)
        plan = [("converge", i, ref["converge_s"] * (i + 1) / (args.cuts + 1))
                for i in range(args.cuts)]
        plan += [("undo", j, ref["undo_s"] * (j + 1) / (args.undo_cuts + 1))
                 for j in range(args.undo_cuts)]
        for kind, n, at in plan:
            cut = deploy_cut if kind == "converge" else undo_cut
            result = cut(vm, n, at, ref, work / "logs")
            vm.stop()
            results.append(result)
            print(f"{kind} cut {n + 1} at {at:.0f} s: {'ok' if result.get('ok') else 'FAILED'} "
                  f"(after: {result['last_line'][-90:]})", flush=True)
            if not result.get("ok"):
                print(json.dumps(result, indent=2), flush=True)
    finally:
        vm.stop()
    summary = {
        "suite": args.suite, "date": date.today().isoformat(),
        "converge_s": round(ref["converge_s"], 1), "undo_s": round(ref["undo_s"], 1),
        "figures": [figure(results, "converge"), figure(results, "undo")],
        "wall_s": round(time.monotonic() - started), "cuts": results,
    }
    out = args.out or REPO / "bench" / "results" / f"crash-sweep-{args.suite}-{date.today()}.json"
    out.write_text(json.dumps(summary, indent=2) + "\n")
    print("; ".join(summary["figures"]) + f" ({args.suite}, {summary['wall_s']} s) -> {out}")
    return 0 if all(r.get("ok") for r in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
