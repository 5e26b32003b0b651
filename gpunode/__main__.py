"""python -m gpunode schema | validate FILE (gpunode.cli)."""

import sys

from gpunode.cli import main

sys.exit(main())
