"""The shquote filter gpunode's templates use (gpunode.ops.shell.TEMPLATES), for Ansible:
the playbook renders gpunode's own templates, so it needs the same filter (shlex.quote of str)."""

import shlex


class FilterModule:
    def filters(self):
        return {"shquote": lambda value: shlex.quote(str(value))}
