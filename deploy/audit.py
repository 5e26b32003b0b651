"""pyinfra INVENTORY deploy/audit.py

The read-only readiness report (see gpunode/deploys/audit.py for its options).

The deploy itself is gpunode.deploys.audit; this file is what pyinfra runs from a clone.
"""

from gpunode.deploys import audit

audit()
