"""A previous boot's panic as pstore keeps it, for the readers' tests and the lemon count's.

The panic lines are leptonai/gpud's test inputs (components/os/kmsg_matcher_test.go at 4a8de33,
tests/fixtures/parity/cases.json: "Fatal Machine check", "Out of memory panic_on_oom"), written
in the shape pstore gives them: its "Panic#1 Part1" header (fs/pstore/platform.c) and each
line's ``<level>``, as a dmesg record in pstore holds them."""

MCE = ["Panic#1 Part1", "<0>[  456.789012] Kernel panic - not syncing: Fatal Machine check",
       "<4>[  456.789013] CPU: 3 PID: 1234 Comm: systemd Tainted: G   M       5.15.0-58-generic #64-Ubuntu",
       "<4>[  456.789014] Hardware name: HP ProLiant DL380 Gen10/ProLiant DL380 Gen10, BIOS U30 06/20/2018"]
OOM = ["Panic#1 Part1", "<0>[  789.012345] Kernel panic - not syncing: out of memory. panic_on_oom is selected"]
WHEN = 1_760_000_000.0  # a record's time (its file's mtime)
