"""Fact fixtures in pyinfra's own style (pyinfra-testing's make_fact_tests).

Each folder fixtures/<module.FactClass>/ holds YAML cases: `command` (the exact shell
command), `requires_command` where the fact has one, `output` (lines the host prints) and
`fact` (the processed value as JSON; our pydantic models encode through `to_json()`).
"""

from pathlib import Path

from pyinfra_testing.facts import make_fact_tests

FIXTURES = Path(__file__).parent / "fixtures"

for _folder in sorted(p for p in FIXTURES.iterdir() if p.is_dir()):
    _cls = make_fact_tests("gpunode.facts", _folder.name, _folder)
    globals()["TestFact_" + _folder.name.replace(".", "_")] = _cls

del _folder, _cls
