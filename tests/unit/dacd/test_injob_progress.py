"""An in-job stage's progress lines reach its status from a thread of their own
(dacd/staging/injob.py _Latest): the copier's reader never waits for etcd, only the newest line
of those that came during a write is written, the last one always is, and a failed write stops
the copy and is raised where the stage runs."""

import threading

import pytest

from daccore.errors import Conflict
from dacd.staging.injob import _Latest


def _line(n: int) -> dict:
    return {"bytes_done": n, "bytes_total": 100, "files_done": 0, "files_total": 1, "rate": 1}


def test_lines_that_came_during_a_write_are_replaced_by_the_newest_and_the_last_is_written():
    gate, written = threading.Event(), []

    def write(p):
        gate.wait(10)
        written.append(p["bytes_done"])

    latest = _Latest(write, on_error=lambda: pytest.fail("no write failed"))
    latest.offer(_line(1))  # taken at once, its write held at the gate
    for n in range(2, 50):
        latest.offer(_line(n))  # the reader goes on without waiting
    gate.set()
    latest.close()
    assert written[-1] == 49 and len(written) <= 3
    assert latest.last_written is not None and latest.last_written.bytes_done == 49


def test_a_failed_write_stops_the_copy_and_is_raised_by_close():
    stopped = []

    def write(p):
        raise Conflict("stage 3 of job 7 is gone: status not written")

    latest = _Latest(write, on_error=lambda: stopped.append(True))
    latest.offer(_line(1))
    with pytest.raises(Conflict, match="is gone"):
        latest.close()
    assert stopped == [True]
