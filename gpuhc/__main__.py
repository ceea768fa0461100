import sys

from gpuhc.run.phases import mark
from gpuhc.run.nvml_early import start

mark("main")

start(sys.argv[1:])  # the NVML read runs beside the CLI's imports (gpuhc/run/nvml_early.py)

from gpuhc.cli import main  # noqa: E402

main()
