"""pyinfra INVENTORY deploy/undo.py [--dry]

Take gpunode off the node: owned files removed, edited files and runtime values put back as
gpunode found them, holds released, boot unit gone; reports what needs a reboot.

The deploy itself is gpunode.deploys.undo; this file is what pyinfra runs from a clone.
"""

from gpunode.deploys import undo

undo()
