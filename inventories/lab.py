"""pyinfra inventory of the bundled lab node: the QEMU guest of `python -m lab up`.

    python -m lab up
    pyinfra inventories/lab.py deploy/site.py --dry

The address, SSH key and known_hosts file (pinning the guest's host key) come from lab.json in
the lab's run dir ($GPUNODE_LAB_RUN_DIR, default ~/.cache/gpunode/lab/run); the port changes at
every `up`. The profile (lab/profile.py) is production's except where hardware can't exist;
reboots are allowed only with GPUNODE_LAB_REBOOT=1. The lab's stand-ins for GPUs are two
e1000e endpoints (8086:10d3, class 0200).
"""

from pyinfra.api.exceptions import PyinfraError

from lab.profile import lab_profile_data
from lab.vm import HOST_NAME, LabNotRunning, read_state

try:
    _state = read_state()
except LabNotRunning as _exc:
    raise PyinfraError(str(_exc)) from None

lab_nodes = [(HOST_NAME, {**_state.pyinfra_host_data(), "gpunode": lab_profile_data()})]
