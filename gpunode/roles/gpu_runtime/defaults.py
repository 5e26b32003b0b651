r"""gpu_runtime defaults: the NodeProfile fields it reads. Each is documented once, in the
schema (gpunode/profile/node.py); the list below is generated from it (make docs).

<!-- gpunode:generated role:gpu_runtime -->
- gpu_persistence (default `true`): Keep the driver initialised between clients:
  nvidia-persistenced installed, enabled and running, persistence mode Enabled on every GPU
  (read back from nvidia-smi). Without it each new process pays the GPU initialisation and power
  limits are lost. Not applicable on hosts without an NVIDIA driver. Why: persistence mode
  Disabled: GPU state torn down between clients, `-pl` lost. Now: `nvidia-persistenced`
  installed, enabled, started; `nvidia-smi -pm 1`. At boot: the service + boot unit (`nvidia-smi
  -pm 1` after it). Read back: `nvidia-smi` persistence mode per GPU; "not applicable" without
  an NVIDIA driver.
- gpu_power_limit (default `null`): GPU power limit in watts for every GPU, or per GPU index
  ({0: 300, 1: 'max'}); 'default' / 'max' = the GPU's own default / maximum limit. None leaves
  the limits alone. Applied now (nvidia-smi -pl) and at every boot after nvidia-persistenced; a
  value outside a GPU's min..max is refused, naming the GPU, before any change. Why: limit below
  default. Now: `nvidia-smi -i N -pl W` (watts, `default`, `max`; one value or `{index:
  value}`); outside a GPU's min..max: refused before any change, naming GPU, value, range. At
  boot: boot unit, after `nvidia-persistenced`. Read back: `power.limit` right after the write;
  `nvidia-smi -q -x`.
- nvidia_module_options (default `{}`): NVIDIA kernel module options (known NVreg_* options of
  nvidia and nvidia_uvm parameters, integers in each one's range; e.g.
  {NVreg_DynamicPowerManagement: 0} keeps GPUs out of runtime D3). Written to
  /etc/modprobe.d/gpunode-nvidia.conf; live at the next driver load. Why: driver defaults that
  don't suit a server (runtime power management). At boot:
  `/etc/modprobe.d/gpunode-nvidia.conf`; `update-initramfs -u` when the initramfs holds the
  module. Read back: `/proc/driver/nvidia/params`, `/sys/module/<module>/parameters/`: "pending
  driver reload / reboot" until they show the value.
<!-- /gpunode:generated -->
"""

from gpunode.profile.node import NodeProfile

SCHEMA = NodeProfile
READS = ("gpu_persistence", "gpu_power_limit", "nvidia_module_options")
DEFAULTS = NodeProfile()
