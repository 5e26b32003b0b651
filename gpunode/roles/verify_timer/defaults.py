r"""verify_timer defaults: the NodeProfile fields it reads. Each is documented once, in the
schema (gpunode/profile/node.py); the list below is generated from it (make docs).

<!-- gpunode:generated role:verify_timer -->
- verify_timer (default `false`): Install gpunode-verify.timer: every verify_interval the node
  re-reads its settings (sysctls, modules, MaxReadReq, C-states, governor, cmdline, memlock,
  kernel pin, GPU persistence mode, power limits, ACS) and the GPUs' health (Xid events, pending
  row remaps, PCIe links) with a read-only shell script and writes Prometheus textfile-collector
  metrics to metrics_dir/gpunode.prom, so drift between deploys shows in monitoring. Why: drift
  unseen between deploys. At boot: `gpunode-verify.timer` every `verify_interval`. Read back:
  metrics in `metrics_dir` (see "Drift you can watch").
- verify_interval (default `15min`): How often the verify timer runs: a systemd time span such
  as '15min', '1h' (one number and one unit: s, min, h, d).
- metrics_dir (default `/var/lib/prometheus/node-exporter`): Where the verify timer writes
  gpunode.prom: the textfile-collector directory node_exporter reads (Debian's
  prometheus-node-exporter default).
<!-- /gpunode:generated -->
"""

from gpunode.profile.node import NodeProfile

SCHEMA = NodeProfile
READS = ("verify_timer", "verify_interval", "metrics_dir")
DEFAULTS = NodeProfile()
