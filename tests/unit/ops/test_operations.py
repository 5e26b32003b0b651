"""Operation tests in pyinfra's own style: facts in -> commands out (fixtures/<op>/<case>.yaml).

A converged case must yield no command and say why (noop_description).
"""

from pathlib import Path

from pyinfra_testing.operations import make_operation_tests

FIXTURES = Path(__file__).parent / "fixtures"

for _folder in sorted(FIXTURES.iterdir()):
    _name = "Test_" + _folder.name.replace(".", "_")
    globals()[_name] = make_operation_tests("gpunode.roles.ops", _folder.name, _folder)

# pyinfra_testing's create_host names the fake host after the last fact it was given, so the
# host name in expected error messages is that fact's key (e.g. "cmdline.KernelCmdline: ...").
