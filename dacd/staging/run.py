"""Staging a job's data in or out, on the buffer's primary host, as the job's user.

The buffer side of each stage line names a buffer variable; here it becomes the path of the
buffer's filesystem on this host. The copy itself runs in `python3 -I -S copier.py` (this
package's copier.py, opened here and run from its descriptor), started with the user's uid,
gid and supplementary groups (subprocess takes them before exec), so dacd never opens a user's
path as root. The copier's progress lines become the buffer's status.

A stage is bounded (docs/security.md, rule 5): the copier runs in its own process group with
limits on memory, processes, open files and CPU time set on it (prlimit) before it reads its
plan; dacd kills the whole group when the stage outlives its time (`stage_timeout`, less a
margin so the one line reaches Slurm before Slurm gives up) or when `Run.cancel` is called
(teardown, dacd stopping). This machine's cgroup v2 hierarchy has no memory, pids or cpu
controller (only hugetlb; the others are cgroup v1), so the limits are rlimits, per process.
"""

from __future__ import annotations

import contextlib
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
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Callable, Protocol

from daccore.errors import InternalError, UserError
from daccore.escape import escape
from daccore.rules.directives import BUFFER_PATH
from dacd.metrics import StageMeter
from dacd.staging.copier import encode_plan

if TYPE_CHECKING:
    from daccore.records.models import StageType
    from dacd.staging.copier import Pair

    #: one of the copier's JSON lines, as json.loads gave it: a progress line, the plan a split
    #: stage's prepare says ({"plan": {...}}), {"done": true} or {"error": "<line>"}
    Line = dict[str, Any]
    #: what a copier's lines sum to at its end (its result, its stderr, its exit status)
    Outcome = tuple[Line, str, int]

__all__ = ["Run", "check_result", "interpreter", "pairs_of", "run_copier", "stage", "time_limit"]

#: the one file of dac's the user's process runs (it imports nothing of dac's)
COPIER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "copier.py")
#: ... and what a split stage's copier runs over it (it loads the copier from its descriptor)
SHARE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "share.py")
#: address space of each copier process: Python, a 1 MiB buffer, a list of LIST_ENTRIES pairs
STAGE_MEMORY = 1 << 30
STAGE_FILES = 1024  # open files per process: a batch holds 64 sources at once
STAGE_PROCESSES = 1024  # the user's processes (RLIMIT_NPROC counts every one of the uid's)


def time_limit(stage_timeout: float) -> float:
    """Seconds dacd gives a stage: `stage_timeout` (what dacctl waits) less a margin, so the
    copier is killed and its one line written before the caller stops waiting."""
    return max(1.0, stage_timeout - min(10.0, stage_timeout / 10))


class _StageLine(Protocol):
    """A `#DW stage_in` or `stage_out` line (daccore.records.models.StageRequest)."""

    @property
    def type(self) -> StageType: ...

    @property
    def source(self) -> str: ...

    @property
    def destination(self) -> str: ...


class _StageLines(Protocol):
    @property
    def stage_in(self) -> Sequence[_StageLine]: ...

    @property
    def stage_out(self) -> Sequence[_StageLine]: ...


class Staged(Protocol):
    """What staging reads of a Buffer: its owner and its stage lines."""

    @property
    def owner_uid(self) -> int: ...

    @property
    def owner_gid(self) -> int: ...

    @property
    def request(self) -> _StageLines: ...


class Run:
    """A running stage that another thread may stop: `cancel(reason)` kills the process group
    of every copier it has started (a split stage runs several) or is about to start, and the
    stage fails with `reason`."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pgids: set[int] = set()
        self.reason: str | None = None

    def started(self, pgid: int) -> None:
        with self._lock:
            self._pgids.add(pgid)
            if self.reason is not None:
                self._kill()

    def cancel(self, reason: str) -> None:
        with self._lock:
            if self.reason is None:
                self.reason = reason
            self._kill()

    def ended(self, pgid: int, kill: bool) -> None:
        with self._lock:
            if kill:
                _killpg(pgid)
            self._pgids.discard(pgid)

    def kill(self) -> None:
        """Every copier of the stage killed, no reason given: a split stage whose one share
        failed stops the others, and says the failed one's line."""
        with self._lock:
            self._kill()

    def _kill(self) -> None:
        for pgid in self._pgids:
            _killpg(pgid)


def _killpg(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
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


def interpreter() -> str:
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


def pairs_of(buffer: Staged, direction: str, fs_path: str) -> list[Pair]:
    """The buffer's stage_<direction> lines as the copier's pairs, the buffer side made the
    path of its filesystem on this host."""
    requests = buffer.request.stage_in if direction == "in" else buffer.request.stage_out
    return [
        {
            "type": r.type.value,
            "source": _buffer_path(r.source, fs_path, direction),
            "destination": _buffer_path(r.destination, fs_path, direction),
        }
        for r in requests
    ]


def stage(
    buffer: Staged,
    direction: str,
    fs_path: str,
    workers: int,
    on_progress: Callable[[Line], None],
    timeout: float = 3600.0,
    run: Run | None = None,
) -> None:
    """Copy every stage_<direction> line of the buffer; UserError naming the path on failure,
    or saying the stage was stopped (`run.cancel`) or ran out of `timeout` seconds."""
    pairs = pairs_of(buffer, direction, fs_path)
    if not pairs:
        return
    run = run or Run()
    plan = encode_plan(
        pairs,
        os.path.join(fs_path, "striped"),
        "destination" if direction == "in" else "source",
        workers,
    )
    timer = threading.Timer(timeout, run.cancel, args=(f"timed out after {timeout:.0f} s",))
    timer.daemon = True
    timer.start()
    try:
        result, stderr, rc = run_copier(buffer, plan, direction, on_progress, timeout, run)
    finally:
        timer.cancel()
    check_result(direction, run, result, stderr, rc)


def check_result(
    direction: str, run: Run, result: Line, stderr: str, rc: int, where: str = ""
) -> None:
    """The copier's outcome as dacd's error: the reason the stage was stopped, the copier's
    one line (`where` names the server of a split stage's share), or its exit."""
    if run.reason is not None:
        raise UserError(f"stage_{direction} {run.reason}")
    # the copier's JSON carries a name's bytes as \udcXX surrogates: escaped here, once
    if "error" in result:
        raise UserError(f"stage_{direction} failed{where}: {escape(result['error'])}")
    if rc != 0 or not result.get("done"):
        raise InternalError(
            f"stage_{direction}: the copier ended with exit {rc}{where}: "
            f"{escape((stderr.strip().splitlines() or ['no output'])[-1])}"
        )


def run_copier(
    buffer: Staged,
    plan: bytes,
    direction: str,
    on_progress: Callable[[Line], None],
    timeout: float,
    run: Run,
    share: bool = False,
    on_plan: Callable[[Line], None] | None = None,
) -> Outcome:
    """One copier (`share`: dacd/staging/share.py over it) as the buffer's owner, `plan` on its
    stdin, followed to its end: (result, stderr, exit); a split stage's plan, said by its
    prepare step before it copies its own share, to `on_plan` at once."""
    env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1"}
    if os.environ.get("DAC_BENCH_RATE"):  # bench/staging.py's per-server cap (the copier's)
        env["DAC_BENCH_RATE"] = os.environ["DAC_BENCH_RATE"]
    # The copier's file is opened here, as root, and run as /dev/fd/N: dac may be installed
    # where the user cannot go (a clone under /root, 0700), and a file the user opens through
    # its own open descriptor needs only the file's own read permission.
    with contextlib.ExitStack() as files:
        fds = [
            files.enter_context(open(f, "rb")).fileno()
            for f in ((SHARE,) if share else ()) + (COPIER,)
        ]
        proc = subprocess.Popen(
            [interpreter(), "-I", "-S", *(f"/dev/fd/{fd}" for fd in fds)],
            pass_fds=fds,
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
    try:
        try:
            stdin = proc.stdin
            assert isinstance(stdin, io.TextIOWrapper)  # stdin=PIPE, text=True
            stdin.buffer.write(plan)
            stdin.close()
        except OSError:  # killed already (cancelled): the reason says why
            pass
        return _follow(proc, direction, on_progress, on_plan)
    finally:
        run.ended(proc.pid, kill=True)  # nothing of the copier's outlives it: not a worker
        proc.wait()
        _wait_gone(proc.pid)


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


def _follow(
    proc: subprocess.Popen[str],
    direction: str,
    on_progress: Callable[[Line], None],
    on_plan: Callable[[Line], None] | None = None,
) -> Outcome:
    """The copier's progress lines into the status, until it ends: (result, stderr, exit)."""
    result: Line = {}
    meter = StageMeter(direction)
    assert proc.stdout is not None and proc.stderr is not None  # stdout=PIPE, stderr=PIPE
    for line in proc.stdout:
        try:
            message = json.loads(line)
        except ValueError:
            continue
        if "bytes_total" in message:
            meter.progress(message)
            on_progress(message)
        else:
            result.update(message)
            if "plan" in message and on_plan:
                on_plan(message["plan"])
    stderr = proc.stderr.read()
    rc = proc.wait()
    if result.get("done") and rc == 0:
        meter.done()
    return result, stderr, rc
