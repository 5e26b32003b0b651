"""Operation tests in pyinfra's own style: facts in -> commands out
(fixtures/<package>/<module>.<op>/<case>.yaml, the operation gpunode.ops.<module>.<op> for the
package "ops", gpunode.roles.<package>.<module>.<op> for a role).

A converged case must yield no command and say why (noop_description).
"""

from pathlib import Path

from pyinfra_testing.operations import make_operation_tests

FIXTURES = Path(__file__).parent / "fixtures"

for _folder in sorted(FIXTURES.glob("*/*.*")):
    _package = _folder.parent.name
    _name = f"Test_{_package}_" + _folder.name.replace(".", "_")
    _base = "gpunode.ops" if _package == "ops" else f"gpunode.roles.{_package}"
    globals()[_name] = make_operation_tests(_base, _folder.name, _folder)

# Each case gives the operation its snapshot (facts: node_read.NodeRead: the Snapshot's fields
# the operation reads). pyinfra_testing's create_host names the fake host after the last fact
# it was given, so the host name in expected error messages is "node_read.NodeRead: ...".
