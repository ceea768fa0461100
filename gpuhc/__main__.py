import sys

from gpuhc.phases import mark
from gpuhc.nvml_early import start

mark("main")

start(sys.argv[1:])  # the NVML read runs beside the CLI's imports (gpuhc/nvml_early.py)

from gpuhc.cli import main  # noqa: E402

main()
