"""Telling whether a local DAC daemon runs, from /proc, at the moments that are hard."""

import os
import subprocess
from pathlib import Path

from clitools import wait_for

from daclocal.procs import is_running, spawn


def test_a_process_still_inside_execve_counts_as_running(tmp_path):
    """Popen returns before the kernel has laid out the new program's arguments: with a cold
    page cache /proc/<pid>/cmdline is then often empty (a demo once took munged for dead)."""
    procs, took_for_dead = [], 0
    try:
        for i in range(200):
            if i % 10 == 0:  # a cold page cache widens the window
                with open("/proc/sys/vm/drop_caches", "w") as f:
                    f.write("3")
            proc = spawn(["sleep", "30"], tmp_path / "out")
            procs.append(proc)
            took_for_dead += not is_running(proc.pid, "sleep")
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
    assert took_for_dead == 0
    assert not any(is_running(proc.pid, "sleep") for proc in procs)  # and gone when gone


def test_a_kernel_thread_zombie_or_other_program_is_not_ours():
    assert not is_running(2, "munged")  # kthreadd: no command line, but not starting up
    proc = subprocess.Popen(["sleep", "30"])
    try:
        # once its command line is laid out (before, an empty one counts as running: above)
        wait_for(
            lambda: Path(f"/proc/{proc.pid}/cmdline").read_bytes(),
            timeout=10,
            what="sleep's command line",
        )
        assert is_running(proc.pid, "sleep") and not is_running(proc.pid, "munged")
    finally:
        proc.kill()
    os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)  # dead, not yet reaped: a zombie
    assert not is_running(proc.pid, "sleep")
    proc.wait()
