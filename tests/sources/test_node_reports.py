"""gpuhc/sources/node_reports.py: the hung-task report's stack and the mlx5 health words, read
as the kernel prints them and nothing else."""

from __future__ import annotations

from gpuhc.model.kernel import EventKind
from gpuhc.sources.kernel_log_parse import parse_lines as parse
from tests.helpers.paths import FIXTURES


def events(lines):
    return [(e.kind, e.state, e.device, e.pci) for e in parse(lines).events]


def test_the_stack_of_each_real_report():
    # the last hung-task report of each (the gpud one ends in the panic it caused: kernel-health's)
    got = {name: [e for e in events((FIXTURES / "node" / name).read_text().splitlines()) if e[0] is EventKind.HUNG_TASK][-1]
           for name in ("hung_uvm_nvc_k8s_device_plugin77.log", "hung_nvidia_rwlock_gdscheck_persistenced15.log",
                        "hung_containerd_shim_panic_gpud.log")}
    assert got == {
        "hung_uvm_nvc_k8s_device_plugin77.log": (EventKind.HUNG_TASK, "nvidia_uvm kernel", "nvc:[driver]", None),
        "hung_nvidia_rwlock_gdscheck_persistenced15.log": (EventKind.HUNG_TASK, "nvidia kernel", "gdscheck", None),
        "hung_containerd_shim_panic_gpud.log": (EventKind.HUNG_TASK, None, "containerd-shim", None),
    }


def test_a_frame_in_another_record_or_after_the_report_is_not_its_stack():
    head = "[ 10.000000] INFO: task a:1 blocked for more than 120 seconds."
    frame = "[ 10.000100]  os_acquire_rwlock_read+0x35/0x50 [nvidia]"
    assert events([head, "[ 10.000050] usb 1-1: new device", frame])[0][1] is None
    assert events([head, "[ 19.000000]  os_acquire_rwlock_read+0x35/0x50 [nvidia]"])[0][1] is None  # seconds later
    # a name's newline stays inside its own record: never a frame of its own
    assert events([head + "\n os_acquire_rwlock_read+0x35/0x50 [nvidia]"])[0][1] is None


def test_mlx5_lines_out_of_the_drivers_grammar_are_nothing():
    lines = ["mlx5_core 0000:d2:00.0: poll_health:825: device's health compromised - reached miss count.",
             "mlx5_core: INFO: synd 0x8: unrecoverable hardware error.",
             "kernel: [123.456792] NETDEV WATCHDOG: eth0 (mlx5_core): transmit queue timed out"]
    assert events(lines) == []


def test_a_health_issue_below_error_warns_and_its_buffer_joins_it():
    pre = "[ 5.0] mlx5_core 0000:41:00.0: print_health_info:431:(pid 0): "
    got = events([pre + "Health issue observed, High temperature, severity(4) WARNING:",
                  pre + "assert_var[0] 0x00000000", pre + "synd 0x10: High temperature"])
    assert got == [(EventKind.NIC_HEALTH, "health_warning", None, "0000:41:00.0")]


def test_a_dumps_assert_words_are_no_event_and_temp_warn_reads_in_both_formats():
    pre = "[ 5.0] mlx5_core 0001:19:00.0: print_health_info:374:(pid 0): "
    assert events([pre + "assert_var[0] 0x00000001", pre + "assert_exit_ptr 0x0080e428"]) == []
    # events.c's "%llx %llx" (a real line: tests/fixtures/kernel_log/real/dmesg_mlx5_link_up_down_temp_warn_cx6dx_note.log)
    # and the newer "%#llx %#llx." of the same source (no real sample of it found yet)
    warn = "[ 51.2] mlx5_core 0000:41:00.0: temp_warn:170:(pid 0): High temperature on sensors with bit set "
    got = events([warn + "0 1", warn + "0x8000000000000000 0x1."])
    assert got == [(EventKind.NIC_HEALTH, "nic_hot", None, "0000:41:00.0")] * 2
    assert events([warn + "hot"]) == []
