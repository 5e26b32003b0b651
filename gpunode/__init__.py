"""gpunode: pyinfra deploys that make a Proxmox VE / Debian host with NVIDIA GPUs, and the LXC
containers on it, ready to serve LLM inference. Call the deploys from your own deploy.py
(gpunode.deploys) or run the repository's deploy/*.py files."""

__version__ = "0.3.0"
