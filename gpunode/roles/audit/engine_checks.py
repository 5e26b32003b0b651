"""The serving engines' checks: what each running engine was started with vs the node.

Pure functions of the snapshot's `engines` (gpunode.facts.engine_read) and the node's own
parts (containers, nvidia-smi, topology, GPU NUMA). Each finding names the process, its
container, the flag or variable, and the fix in the engine's terms; the engine must be
restarted for any of them to take effect (gpunode never restarts or edits an engine).
"""

from __future__ import annotations

from gpunode.facts.containers import ContainerState
from gpunode.facts.engine_read import EngineProcess
from gpunode.facts.engines import gpus_per_node
from gpunode.facts.gpu_numa import local_cpuset, parse_cpulist
from gpunode.profile.check import Check, ok
from gpunode.roles.audit.snapshot import NodeSnapshot

ENGINES_READ = "vLLM, SGLang, TGI, TensorRT-LLM, llama.cpp"
SHM_MIN_KIB = 1024 * 1024
TP_FLAG = {"vllm": "--tensor-parallel-size", "sglang": "--tp-size", "tgi": "--num-shard",
           "trtllm": "--tp_size"}
EAGER_FLAG = {"vllm": "--enforce-eager", "sglang": "--disable-cuda-graph",
              "tgi": "--cuda-graphs 0"}
FRACTION_FLAG = {"vllm": "--gpu-memory-utilization", "sglang": "--mem-fraction-static"}
NCCL_VARIABLES: dict[str, tuple[str, str]] = {
    "NCCL_P2P_DISABLE": ("P0", "GPU peer-to-peer off: every all-reduce goes through host "
                               "memory (single-stream decode drops on PCIe nodes)"),
    "NCCL_SHM_DISABLE": ("P0", "shared-memory transport off: intra-node traffic goes over "
                               "sockets"),
    "NCCL_IB_DISABLE": ("P2", "InfiniBand/RoCE off: only matters across nodes"),
    "NCCL_P2P_LEVEL": ("P2", "overrides NCCL's own choice of P2P path"),
    "NCCL_DEBUG": ("P2", "debug output left on (NCCL's docs: debug variables may give "
                         "sub-optimal behaviour or hangs)"),
    "NCCL_DEBUG_SUBSYS": ("P2", "debug output left on"),
}
RESTART = "and restart the engine"


def engine_subject(p: EngineProcess) -> str:
    """'vllm 4242 (CT 110)': the process and where it runs."""
    return f"{p.engine} {p.pid} ({p.where})"


def _name(p: EngineProcess, what: str) -> str:
    """'CUDA graphs: vllm 4242 (CT 110)' (what first: the terminal table clips the end)."""
    return f"{what}: {engine_subject(p)}"


def _container(p: EngineProcess, snap: NodeSnapshot) -> ContainerState | None:
    if p.vmid is None:
        return None
    return next((c for c in snap.containers or [] if c.vmid == p.vmid), None)


def _visible_list(p: EngineProcess) -> list[str] | None:
    if p.env is None or "CUDA_VISIBLE_DEVICES" not in p.env:
        return None
    return [x.strip() for x in p.env["CUDA_VISIBLE_DEVICES"].split(",") if x.strip()]


def visible_gpus(p: EngineProcess, snap: NodeSnapshot) -> tuple[int | None, str]:
    """How many GPUs the process can use, and how that is known."""
    container = _container(p, snap)
    base: int | None = None
    how = ""
    if container is not None and container.config_read:
        base, how = len(container.gpus), f"CT {p.vmid} is given {len(container.gpus)}"
    elif p.where == "host" and snap.nvidia is not None and snap.nvidia.present:
        base, how = len(snap.nvidia.gpus), f"the host has {len(snap.nvidia.gpus)}"
    listed = _visible_list(p)
    if listed is None:
        return base, how
    cvd = f"CUDA_VISIBLE_DEVICES={p.env['CUDA_VISIBLE_DEVICES'] if p.env else ''}"
    if base is None or len(listed) <= base:
        return len(listed), cvd
    return base, f"{cvd}, but {how}"


def check_parallel(p: EngineProcess, snap: NodeSnapshot) -> list[Check]:
    if p.engine not in TP_FLAG:
        return []
    s = p.settings
    count, how = visible_gpus(p, snap)
    flag = TP_FLAG[p.engine]
    if p.engine == "tgi" and "tensor_parallel" not in s.source:
        return [ok(_name(p, "parallel size"), "one shard per visible GPU (TGI's default)",
                   kind="engine parallel size")]
    world = gpus_per_node(s)
    live = f"TP {s.tensor_parallel} x PP {s.pipeline_parallel}"
    if s.data_parallel > 1 and not s.dp_attention:
        live += f" x DP {s.data_parallel}"
    live += f" = {world}" if s.nodes == 1 else f" over {s.nodes} nodes = {world} here"
    if count is None:
        return [Check(name=_name(p, "parallel size"), status="n/a",
                      live=f"{live}; the GPUs it can see are unknown (no nvidia-smi, no "
                      "container config, no CUDA_VISIBLE_DEVICES)")]
    if world > count:
        return [Check(name=_name(p, "parallel size"), status="P0",
                      live=f"{live} GPUs, it sees {count} ({how})", want=f"<= {count}",
                      fix=f"start it with {flag} {max(1, count // s.pipeline_parallel)} "
                      f"(TP x PP <= {count}; now set by "
                      f"{s.source.get('tensor_parallel', 'default')}), or give it {world} "
                      f"GPUs, {RESTART}")]
    if world < count:
        return [Check(name=_name(p, "parallel size"), status="P2",
                      live=f"{live}: uses {world} of the {count} GPUs it sees ({how})",
                      want=str(count), fix=f"{flag} {count}, or CUDA_VISIBLE_DEVICES listing "
                      f"only the GPUs it uses, {RESTART}")]
    return [ok(_name(p, "parallel size"), f"{live} = the {count} GPUs it sees",
               kind="engine parallel size")]


def check_device_order(p: EngineProcess) -> list[Check]:
    listed = _visible_list(p)
    if listed is None or len(listed) < 2 or p.env is None:
        return []
    if p.env.get("CUDA_DEVICE_ORDER") == "PCI_BUS_ID":
        return [ok(_name(p, "CUDA device order"), "CUDA_DEVICE_ORDER=PCI_BUS_ID",
                   kind="engine CUDA device order")]
    return [Check(name=_name(p, "CUDA device order"), status="P2",
                  live=f"CUDA_VISIBLE_DEVICES={p.env['CUDA_VISIBLE_DEVICES']} without "
                  "CUDA_DEVICE_ORDER=PCI_BUS_ID: CUDA numbers GPUs fastest first, so the "
                  "indices may not be nvidia-smi's", want="CUDA_DEVICE_ORDER=PCI_BUS_ID",
                  fix=f"set CUDA_DEVICE_ORDER=PCI_BUS_ID in the engine's environment {RESTART}")]


def check_eager(p: EngineProcess) -> list[Check]:
    if p.engine not in EAGER_FLAG:
        return []
    s = p.settings
    if not s.eager:
        return [ok(_name(p, "CUDA graphs"), "on", kind="engine CUDA graphs")]
    given = s.source.get("eager", EAGER_FLAG[p.engine])
    return [Check(name=_name(p, "CUDA graphs"), status="P0",
                  live=f"off ({given})", want="on",
                  fix=f"remove {given} {RESTART} (CUDA graphs off costs decode speed: "
                  "published 20 vs 43 tok/s on 8 PCIe GPUs)")]


def check_nccl(p: EngineProcess) -> list[Check]:
    if p.env is None:
        return []
    found = [(name, p.env[name], *NCCL_VARIABLES[name]) for name in NCCL_VARIABLES
             if name in p.env and not (name.endswith("_DISABLE") and p.env[name] == "0")]
    checks = [Check(name=_name(p, name), status=rank, live=f"{name}={value}: {why}",  # type: ignore[arg-type]
                    want="unset", fix=f"unset {name} in the engine's environment (its unit, "
                    f"docker run -e, the container's environment) {RESTART}")
              for name, value, rank, why in found]
    return checks or [ok(_name(p, "NCCL variables"), "no debug leftovers",
                         kind="engine NCCL variables")]


def _bytes(limit: str | None) -> float | None:
    if limit is None:
        return None
    if limit in ("unlimited", "infinity"):
        return float("inf")
    return float(limit) if limit.isdigit() else None


def check_memlock(p: EngineProcess, snap: NodeSnapshot) -> list[Check]:
    live = _bytes(p.memlock_soft)
    if live is None:
        return []
    container = _container(p, snap)
    want_text = "unlimited"
    if container is not None and container.memlock_live:
        want_text = container.memlock_live
    want = _bytes(want_text) or float("inf")
    if live >= want:
        return [ok(_name(p, "memlock"), str(p.memlock_soft), kind="engine memlock")]
    whose = f"CT {p.vmid}'s init has {want_text}" if container else "wants unlimited"
    return [Check(name=_name(p, "memlock"), status="P0",
                  live=f"{p.memlock_soft} bytes ({whose})", want=want_text,
                  fix="raise the engine's own limit: LimitMEMLOCK=infinity in its unit, "
                  "docker run --ulimit memlock=-1, or ulimit -l unlimited in its start "
                  f"script, {RESTART}")]


def _local(p: EngineProcess, snap: NodeSnapshot) -> tuple[str, str] | None:
    container = _container(p, snap)
    if container is not None and container.local_cpus and container.local_mems:
        return container.local_cpus, container.local_mems
    numa = snap.gpu_numa
    if numa is None:
        return None
    listed = _visible_list(p)
    gpus = [int(x) for x in listed if x.isdigit()] if listed else sorted(numa.gpu_bdf)
    return local_cpuset(numa, gpus)


def check_affinity(p: EngineProcess, snap: NodeSnapshot) -> list[Check]:
    local = _local(p, snap)
    if local is None or not p.cpus_allowed:
        return []
    checks = []
    for what, allowed, near, how in (
            ("CPU affinity", p.cpus_allowed, local[0], "numactl --cpunodebind"),
            ("memory affinity", p.mems_allowed, local[1], "numactl --membind")):
        mine, theirs = set(parse_cpulist(allowed or "")), set(parse_cpulist(near))
        if not mine or mine <= theirs:
            checks.append(ok(_name(p, what), f"{allowed} (local to its GPUs: {near})",
                             kind=f"engine {what}"))
            continue
        status = "P0" if not mine & theirs else "P2"
        checks.append(Check(name=_name(p, what), status=status,  # type: ignore[arg-type]
                            live=f"{allowed}, its GPUs' NUMA node(s): {near}", want=near,
                            fix=f"start it under {how}={local[1]} (or pin the container: "
                            f"lxc.cgroup2.cpuset.cpus: {local[0]}), {RESTART}"))
    return checks


def check_shm(p: EngineProcess) -> list[Check]:
    if p.shm_kib is None:
        return []
    s = p.settings
    world = gpus_per_node(s)
    size = f"{p.shm_kib // 1024} MiB"
    if world < 2 or p.shm_kib >= SHM_MIN_KIB:
        return [ok(_name(p, "/dev/shm"), size, kind="engine /dev/shm")]
    where = "docker run --shm-size=16g (or --ipc=host)" if p.docker else (
        "a larger tmpfs on the container's /dev/shm (lxc.mount.entry: tmpfs dev/shm tmpfs "
        "rw,nosuid,nodev,size=16G,create=dir 0 0)" if p.where != "host"
        else "mount -o remount,size=16G /dev/shm")
    return [Check(name=_name(p, "/dev/shm"), status="P0",
                  live=f"{size} for {world} ranks: NCCL fails with 'No space left on device'",
                  want=">= 1 GiB", fix=f"{where}, {RESTART}")]


def _major_minor(text: str | None) -> tuple[int, int] | None:
    parts = (text or "").split(".")
    if len(parts) < 2 or not parts[0].isdigit() or not parts[1].isdigit():
        return None
    return int(parts[0]), int(parts[1])


def check_cuda(p: EngineProcess, snap: NodeSnapshot) -> list[Check]:
    engine = _major_minor(p.torch_cuda)
    driver = _major_minor(snap.nvidia.cuda_version if snap.nvidia else None)
    if engine is None:
        return [Check(name=_name(p, "CUDA build"), status="n/a",
                      live="torch/version.py not found under the process's prefixes")]
    if driver is None:
        return [Check(name=_name(p, "CUDA build"), status="n/a",
                      live=f"torch {p.torch_version} for CUDA {p.torch_cuda}; the driver's "
                      "CUDA version is unknown (no nvidia-smi)")]
    live = f"torch {p.torch_version} for CUDA {p.torch_cuda}, driver CUDA " \
           f"{snap.nvidia.cuda_version if snap.nvidia else ''}"
    if engine[0] > driver[0]:
        return [Check(name=_name(p, "CUDA build"), status="P0", live=live,
                      want=f"CUDA <= {driver[0]}.x",
                      fix=f"install the engine's build for CUDA {driver[0]} (torch's "
                      f"cu{driver[0]}x wheels), or a driver that supports CUDA {engine[0]}")]
    if engine > driver:
        return [Check(name=_name(p, "CUDA build"), status="P2", live=live,
                      want=f"<= {driver[0]}.{driver[1]}",
                      fix="runs under CUDA minor-version compatibility (no PTX JIT); a "
                      "newer driver removes the caveat")]
    return [ok(_name(p, "CUDA build"), live, kind="engine CUDA build")]


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split(".") if x.isdigit())


def check_cuda_compat(p: EngineProcess, snap: NodeSnapshot) -> list[Check]:
    """A CUDA compat libcuda on the engine's LD_LIBRARY_PATH older than the host's driver:
    the process loads a driver library the kernel module does not match (CUDA error 803)."""
    driver = snap.driver_loaded or (snap.nvidia.driver_version if snap.nvidia else None)
    paths = (p.env or {}).get("LD_LIBRARY_PATH", "").split(":")
    used = [lib for lib in p.cuda_compat if lib.rsplit("/", 1)[0] in paths]
    if not driver or not used:
        return []
    checks = []
    for lib in used:
        version = lib.rsplit("libcuda.so.", 1)[-1]
        if _version(version) < _version(driver):
            checks.append(Check(
                name=_name(p, "CUDA compat library"), status="P0",
                live=f"{lib} ({version}) on LD_LIBRARY_PATH, host driver {driver}",
                want=f"none, or >= {driver}",
                fix=f"take {lib.rsplit('/', 1)[0]} off LD_LIBRARY_PATH (the host driver is "
                f"newer) {RESTART}"))
    return checks or [ok(_name(p, "CUDA compat library"), f"{used[0]} (>= driver {driver})",
                         kind="engine CUDA compat library")]


def check_custom_all_reduce(p: EngineProcess, snap: NodeSnapshot) -> list[Check]:
    s = p.settings
    links = snap.topology.links if snap.topology else {}
    if p.engine not in ("vllm", "sglang") or s.tensor_parallel < 2 or not links:
        return []
    if any(v.startswith("NV") for v in links.values()) or not s.custom_all_reduce:
        return []
    return [Check(name=_name(p, "custom all-reduce"), status="P2",
                  live=f"on, TP {s.tensor_parallel} over PCIe only (no NVLink in topo -m)",
                  want="NCCL all-reduce where P2P is not OK",
                  fix="if nvidia-smi topo -p2p r shows no OK between its GPUs, start it with "
                  f"--disable-custom-all-reduce {RESTART}")]


def check_memory_fraction(p: EngineProcess) -> list[Check]:
    s = p.settings
    flag = FRACTION_FLAG.get(p.engine)
    if flag is None or s.gpu_memory_fraction is None or "gpu_memory_fraction" not in s.source:
        return []
    value = s.gpu_memory_fraction
    if value < 0.5:
        why = "leaves over half of each GPU's memory to nothing: a small KV cache"
    elif value > 0.95:
        why = "little headroom: CUDA graphs and the other processes may run out of memory"
    else:
        return [ok(_name(p, flag), f"{value:g}", kind=f"engine {flag}")]
    return [Check(name=_name(p, flag), status="P2", live=f"{value:g}: {why}",
                  want="0.5 .. 0.95", fix=f"check {flag} against the model's size {RESTART}")]


def check_notes(p: EngineProcess) -> list[Check]:
    return [Check(name=_name(p, "read"), status="P2", live=note,
                  fix="look at the process by hand (cat /proc/PID/cmdline, environ)")
            for note in p.notes]


def engine_process_checks(p: EngineProcess, snap: NodeSnapshot) -> list[Check]:
    """One engine's checks; each fix starts with the process it is for (the terminal table
    clips long check names)."""
    checks = [*check_notes(p), *check_parallel(p, snap), *check_device_order(p),
              *check_eager(p), *check_nccl(p), *check_memlock(p, snap),
              *check_affinity(p, snap), *check_shm(p), *check_cuda(p, snap),
              *check_cuda_compat(p, snap), *check_custom_all_reduce(p, snap),
              *check_memory_fraction(p)]
    where = engine_subject(p)
    return [c.model_copy(update={"fix": f"{where}: {c.fix}"}) if c.fix else c for c in checks]


def check_engines(snap: NodeSnapshot) -> list[Check]:
    """Every engine process's checks; one row when none runs (none: they were not read)."""
    if snap.engines is None:
        return []
    checks = [Check(name="engines", status="P2", live=note) for note in snap.engines.notes]
    if not snap.engines.processes:
        return [*checks, Check(name="engines", status="n/a",
                               live=f"no serving engine running ({ENGINES_READ})")]
    for process in snap.engines.processes:
        checks += engine_process_checks(process, snap)
    return checks
