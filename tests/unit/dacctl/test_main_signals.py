import signal
import subprocess
import sys
import time

TERMINATION = {signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT}


def test_dacctl_started_with_sigterm_blocked_still_ends_at_sigterm():
    """As burst_buffer/datawarp starts it: forked from a slurmctld thread that blocks
    SIGTERM, whose mask execve keeps."""
    code = (
        "import sys, time; from dacctl.main import _unblock_termination; "
        "_unblock_termination(); print('ready', flush=True); time.sleep(30)"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code],
        stdout=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.pthread_sigmask(signal.SIG_BLOCK, TERMINATION),
    )
    assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
    start = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=10) == -signal.SIGTERM
    assert time.monotonic() - start < 5
