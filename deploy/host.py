"""pyinfra INVENTORY deploy/host.py

Host tuning only (no kernel cmdline, no driver, no reboot), then the read-back.

The deploy itself is gpunode.deploys.host_tuning_only; this file is what pyinfra runs from a clone.
"""

from gpunode.deploys import host_tuning_only

host_tuning_only()
