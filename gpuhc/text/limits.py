"""Documented bounds of sizes gpuhc accepts from the command line, the config and scenario files,
and the one bound on a time that says which clock a kernel-log stamp counts on.

Past a bound, a value is a usage error (exit 2) naming the option or the file, line and key,
never a MemoryError after eating the node, or an hour-long run. No real node comes near them.
Kept in a module that imports nothing: the health check's command line reads them on every run.
"""

MAX_GPUS = 1024  # per node: a scenario's `count` and `gpus`, and `--gpus` (indices 0 .. MAX_GPUS-1)
MAX_NVLINKS = 64  # per GPU in a scenario (NVML's own NVML_NVLINK_MAX_LINKS is 18)
MAX_DL_ROTATION = 18  # the nvlink check's dl_rotation: NVML's NVML_NVLINK_MAX_LINKS (every link its own run)
MAX_WAIT_S = 3600.0  # `--timeout` of snapshot and baseline capture: seconds, finite
MAX_DURATION_S = 100 * 365 * 86400.0  # a duration option (--since, --older-than): a century, finite
# The job checks: samples kept per series and GPU (a scenario's lists, and a live read
# of the driver's buffer), and job ids per GPU.
MAX_ACTIVITY_SAMPLES = 4096
MAX_JOBS_PER_GPU = 64
# Kernel-log times below this are seconds since boot (a recorded plain `dmesg` has no boot time to
# add), at or above it seconds since the epoch: 1e9 s after boot is 31 years, 1e9 s after the epoch
# is 2001. Read by the parser's callers and by the checks' event window (gpuhc/checks/kernel_window.py).
RELATIVE_LIMIT = 1e9
