"""audit: read the live node and report it against the profile, ranked, changing nothing.

    pyinfra -y INVENTORY deploy/audit.py [--data report=json|md|both] [--data report_dir=DIR]

- `snapshot.gather_snapshot(profile)`: six read-only facts -> NodeSnapshot (the tuning facts
  plus `facts.AuditFacts`: IOMMU, PCI tree, nvidia-smi -q -x, NVLink, driver, kernels,
  Proxmox, containers, in one command);
- `checks.audit_checks(profile, snap)`: pure, -> list[Check] (`checks.tuning_checks` is its
  first part; `gpu_checks`, `pcie_checks` and `system_checks` hold the rest);
- `report.render_table / render_markdown / to_json / write_reports`: pure renderers;
- `run.audit_node`: the operation of deploy/audit.py (no command on the node; fails the host
  through a local failing command when a P0 or P1 is open, so every other host still runs);
  `verify.verify_node`: the end of deploy/site.py (prints what is open and what waits for a
  reboot or restart; never fails).

Ranks (model.Check.status): P0 fixable at runtime, P1 needs a reboot or container restart,
P2 minor, limit = the hardware's own, n/a = not applicable / not present.
"""
