"""gpunode readiness audit: one read-only report per host, ranked; fails when P0/P1 are open.

    pyinfra -y INVENTORY deploy/audit.py                      # report; exit 1 if P0/P1 open
    pyinfra -y INVENTORY deploy/audit.py --data report=both   # + reports/<host>.json and .md
    pyinfra INVENTORY deploy/audit.py --dry                   # report only, exit 0 always

Each host's report has four parts: actionable checks ranked P0 (fixable at runtime), P1 (needs
a reboot or container restart), P2 (minor), each with the exact fix and whether deploy/site.py
would apply it; confirmed good checks with the live value read; known limits of the hardware;
and what is not present on this node (no GPU, no Proxmox). It changes nothing on the node: the
operation runs no command there and reads six read-only facts, in one remote command.

Options (pyinfra --data, for every host):
- report=json|md|both|none: write the report files (default none);
- report_dir=PATH: where to write them (default ./reports);
- gpunode_audit_active=1: active mode, off by default and never part of a deploy: also runs
  the bandwidth tests present on the node (CUDA samples' p2pBandwidthLatencyTest, nccl-tests'
  all_reduce_perf and sendrecv_perf over all GPUs), each bounded by
  gpunode_audit_active_timeout seconds (default 120, 10..3600), and reports each GPU pair's
  P2P bandwidth and the bus bandwidth against what the PCIe links carry. It loads the GPUs:
  run it on a node that serves nothing.
- gpunode_audit_engine_metrics=1: also read each serving engine's own /metrics (vLLM, SGLang)
  where the engine listens, each bounded by gpunode_audit_engine_metrics_timeout seconds
  (default 5, 1..60): time per output token and requests running, into the report's Engines
  section and the textfile metrics. Off by default; GET only.

Failure signal: with -y (cron, CI, monitoring) every host is audited and pyinfra exits 1 when
any host has a P0 or P1 open ("HOST: audit failed: N open (P0 a, P1 b)", that host marked
failed), 0 otherwise. --dry and the interactive run (no -y) print the report during change
detection; --dry exits 0.
"""

from pyinfra import host, state
from pyinfra.api.exceptions import PyinfraError

from gpunode.profile.loader import profiles_of_run
from gpunode.pyinfra_adapter import fit_cli_tables
from gpunode.roles.audit.report import active_timeout, engine_metrics_timeout, report_formats
from gpunode.roles.audit.run import audit_node


def audit() -> None:
    """The read-only readiness report of this host (options: host data report, report_dir)."""
    fit_cli_tables()  # pyinfra's tables within 100 columns
    profile = profiles_of_run(state)[host.name]

    try:
        formats = report_formats(host.data.get("report"))
    except ValueError as exc:
        raise PyinfraError(f"{host.name}: --data {exc}") from None

    try:
        active = active_timeout(host.data.get("gpunode_audit_active"),
                                host.data.get("gpunode_audit_active_timeout"))
    except ValueError as exc:
        raise PyinfraError(f"{host.name}: --data {exc}") from None

    try:
        engine_metrics = engine_metrics_timeout(
            host.data.get("gpunode_audit_engine_metrics"),
            host.data.get("gpunode_audit_engine_metrics_timeout"))
    except ValueError as exc:
        raise PyinfraError(f"{host.name}: --data {exc}") from None

    audit_node(
        name="Audit the live node" + (" (active: bandwidth tests)" if active else " (read-only)"),
        profile=profile,
        formats=formats,
        report_dir=str(host.data.get("report_dir") or "reports"),
        active_timeout_s=active,
        engine_metrics_timeout_s=engine_metrics,
    )
