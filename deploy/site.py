"""pyinfra INVENTORY deploy/site.py

Everything: host tuning, NVIDIA driver pin, kernel cmdline and pin, then the read-back.

The deploy itself is gpunode.deploys.site; this file is what pyinfra runs from a clone.
"""

from gpunode.deploys import site

site()
