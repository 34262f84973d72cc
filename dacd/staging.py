"""Staging a job's data in or out, on the buffer's primary host, as the job's user.

The buffer side of each stage line names a buffer variable; here it becomes the path of the
buffer's filesystem on this host. The copy itself runs in `python3 -I -S dacd/copier.py`,
started with the user's uid, gid and supplementary groups (subprocess takes them before exec),
so dacd never opens a user's path as root. The copier's progress lines become the buffer's
status.

A stage is bounded (docs/security.md, rule 5): the copier runs in its own process group with
limits on memory, processes, open files and CPU time set on it (prlimit) before it reads its
plan; dacd kills the whole group when the stage outlives its time (`stage_timeout`, less a
margin so the one line reaches Slurm before Slurm gives up) or when `Run.cancel` is called
(teardown, dacd stopping). This machine's cgroup v2 hierarchy has no memory, pids or cpu
controller (only hugetlb; the others are cgroup v1), so the limits are rlimits, per process.
"""

from __future__ import annotations

import functools
import io
import json
import math
import os
import pwd
import resource
import shutil
import signal
import subprocess
import sys
import threading
import time
from typing import Callable

from daccore.errors import InternalError, UserError
from daccore.escape import escape
from daccore.rules.directives import BUFFER_PATH
from dacd.copier import encode_plan
from dacd.metrics import StageMeter

__all__ = ["Run", "stage", "time_limit"]

#: the one file of dac's the user's process runs (it imports nothing of dac's)
COPIER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "copier.py")
#: address space of each copier process: Python, a 1 MiB buffer, a list of LIST_ENTRIES pairs
STAGE_MEMORY = 1 << 30
STAGE_FILES = 1024  # open files per process: a batch holds 64 sources at once
STAGE_PROCESSES = 1024  # the user's processes (RLIMIT_NPROC counts every one of the uid's)


def time_limit(stage_timeout: float) -> float:
    """Seconds dacd gives a stage: `stage_timeout` (what dacctl waits) less a margin, so the
    copier is killed and its one line written before the caller stops waiting."""
    return max(1.0, stage_timeout - min(10.0, stage_timeout / 10))


class Run:
    """A running stage that another thread may stop: `cancel(reason)` kills the copier's
    process group at once (or the copier about to start) and the stage fails with `reason`."""

    def __init__(self):
        self._lock = threading.Lock()
        self._pgid: int | None = None
        self.reason: str | None = None

    def started(self, pgid: int) -> None:
        with self._lock:
            self._pgid = pgid
            if self.reason is not None:
                self._kill()

    def cancel(self, reason: str) -> None:
        with self._lock:
            if self.reason is None:
                self.reason = reason
            self._kill()

    def ended(self, kill: bool) -> None:
        with self._lock:
            if kill:
                self._kill()
            self._pgid = None

    def _kill(self) -> None:
        if self._pgid is not None:
            try:
                os.killpg(self._pgid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def _buffer_path(path: str, fs_path: str, direction: str) -> str:
    m = BUFFER_PATH.match(path)
    if m is None:
        return path
    var, rest = m.group(1) or m.group(2), (m.group(3) or "").lstrip("/")
    if var == "DW_JOB_STRIPED":
        return os.path.join(fs_path, "striped", rest)
    # the grammar refuses other targets at submission (daccore/rules/directives.py); a spec written
    # before it did still fails here in one line
    raise UserError(f"stage_{direction}: ${var} cannot be staged; stage through $DW_JOB_STRIPED")


def _python() -> str:
    """An interpreter every user may run: the copier is standard library only, so the
    system's python3 serves; dacd's own may sit in a directory only root can enter."""
    return shutil.which("python3", path="/usr/bin:/bin") or sys.executable


def _groups(uid: int, gid: int) -> list[int]:
    try:
        return os.getgrouplist(pwd.getpwuid(uid).pw_name, gid)
    except KeyError:  # a uid without a passwd entry has only its primary group
        return [gid]


def _limits(seconds: float) -> list[tuple[int, int]]:
    return [
        (resource.RLIMIT_AS, STAGE_MEMORY),
        (resource.RLIMIT_NOFILE, STAGE_FILES),
        (resource.RLIMIT_NPROC, STAGE_PROCESSES),
        (resource.RLIMIT_CPU, math.ceil(seconds)),
    ]


def _set_limits(limits: list[tuple[int, int]]) -> None:
    """In the child between setuid and exec (subprocess's preexec_fn): the process is not
    dumpable there, so the user cannot get at it before its limits hold, and lowering one's own
    limits needs no privilege (this machine's root lacks CAP_SYS_RESOURCE: prlimit on the
    user's process from dacd fails with EPERM). Nothing here takes a lock another thread of
    dacd could hold: setrlimit only."""
    for what, value in limits:
        resource.setrlimit(what, (value, value))


def stage(
    buffer,
    direction: str,
    fs_path: str,
    workers: int,
    on_progress: Callable[[dict], None],
    timeout: float = 3600.0,
    run: Run | None = None,
) -> None:
    """Copy every stage_<direction> line of the buffer; UserError naming the path on failure,
    or saying the stage was stopped (`run.cancel`) or ran out of `timeout` seconds."""
    requests = buffer.request.stage_in if direction == "in" else buffer.request.stage_out
    if not requests:
        return
    run = run or Run()
    pairs = [
        {
            "type": r.type.value,
            "source": _buffer_path(r.source, fs_path, direction),
            "destination": _buffer_path(r.destination, fs_path, direction),
        }
        for r in requests
    ]
    plan = encode_plan(
        pairs,
        os.path.join(fs_path, "striped"),
        "destination" if direction == "in" else "source",
        workers,
    )
    env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1"}
    # The copier's file is opened here, as root, and run as /dev/fd/N: dac may be installed
    # where the user cannot go (a clone under /root, 0700), and a file the user opens through
    # its own open descriptor needs only the file's own read permission.
    with open(COPIER, "rb") as source:
        proc = subprocess.Popen(
            [_python(), "-I", "-S", f"/dev/fd/{source.fileno()}"],
            pass_fds=(source.fileno(),),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd="/",
            env=env,
            user=buffer.owner_uid,
            group=buffer.owner_gid,
            extra_groups=_groups(buffer.owner_uid, buffer.owner_gid),
            start_new_session=True,  # its own process group: killed as one
            preexec_fn=functools.partial(_set_limits, _limits(timeout)),
        )
    run.started(proc.pid)
    timer = threading.Timer(timeout, run.cancel, args=(f"timed out after {timeout:.0f} s",))
    timer.daemon = True
    timer.start()
    try:
        try:
            stdin = proc.stdin
            assert isinstance(stdin, io.TextIOWrapper)  # stdin=PIPE, text=True
            stdin.buffer.write(plan)
            stdin.close()
        except OSError:  # killed already (cancelled): the reason says why
            pass
        result, stderr, rc = _follow(proc, direction, on_progress)
    finally:
        timer.cancel()
        run.ended(kill=True)  # nothing of the copier's outlives the stage: not a worker
        proc.wait()
        _wait_gone(proc.pid)
    if run.reason is not None:
        raise UserError(f"stage_{direction} {run.reason}")
    # the copier's JSON carries a name's bytes as \udcXX surrogates: escaped here, once
    if "error" in result:
        raise UserError(f"stage_{direction} failed: {escape(result['error'])}")
    if rc != 0 or not result.get("done"):
        raise InternalError(
            f"stage_{direction}: the copier ended with exit {rc}: "
            f"{escape((stderr.strip().splitlines() or ['no output'])[-1])}"
        )


def _wait_gone(pgid: int, timeout: float = 30.0) -> None:
    """Until the copier's killed workers are gone too (reaped by init: a worker stuck in a
    write leaves only when that ends), so the step after the stage unmounts a filesystem no
    process holds. Seen: wipefs "Device or resource busy" right after a stage's timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.02)


def _follow(proc, direction: str, on_progress) -> tuple[dict, str, int]:
    """The copier's progress lines into the status, until it ends: (result, stderr, exit)."""
    result: dict = {}
    meter = StageMeter(direction)
    for line in proc.stdout:
        try:
            message = json.loads(line)
        except ValueError:
            continue
        if "bytes_total" in message:
            meter.progress(message)
            on_progress(message)
        else:
            result = message
    stderr = proc.stderr.read()
    rc = proc.wait()
    if result.get("done") and rc == 0:
        meter.done()
    return result, stderr, rc
