"""Staging a job's data in or out, on the buffer's primary host, as the job's user.

The buffer side of each stage line names a buffer variable; here it becomes the path of the
buffer's filesystem on this host. The copy itself runs in `python3 -I -S dacd/copier.py`,
started with the user's uid, gid and supplementary groups (subprocess takes them before exec),
so dacd never opens a user's path as root. The copier's progress lines become the buffer's
status.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import sys
from typing import Callable

from daccore.directives import BUFFER_PATH
from daccore.errors import InternalError, UserError
from daccore.escape import escape
from dacd.copier import encode_plan
from dacd.metrics import StageMeter

__all__ = ["stage"]

#: the one file of dac's the user's process runs (it imports nothing of dac's)
COPIER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "copier.py")



def _buffer_path(path: str, fs_path: str, direction: str) -> str:
    m = BUFFER_PATH.match(path)
    if m is None:
        return path
    var, rest = m.group(1) or m.group(2), (m.group(3) or "").lstrip("/")
    if var == "DW_JOB_STRIPED":
        return os.path.join(fs_path, "striped", rest)
    # the grammar refuses other targets at submission (daccore/directives.py); a spec written
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


def stage(buffer, direction: str, fs_path: str, workers: int,
          on_progress: Callable[[dict], None]) -> None:
    """Copy every stage_<direction> line of the buffer; UserError naming the path on failure."""
    requests = buffer.request.stage_in if direction == "in" else buffer.request.stage_out
    if not requests:
        return
    pairs = [{"type": r.type.value,
              "source": _buffer_path(r.source, fs_path, direction),
              "destination": _buffer_path(r.destination, fs_path, direction)} for r in requests]
    plan = encode_plan(pairs, os.path.join(fs_path, "striped"),
                       "destination" if direction == "in" else "source", workers)
    env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1"}
    # The copier's file is opened here, as root, and run as /dev/fd/N: dac may be installed
    # where the user cannot go (a clone under /root, 0700), and a file the user opens through
    # its own open descriptor needs only the file's own read permission.
    with open(COPIER, "rb") as source:
        proc = subprocess.Popen(
            [_python(), "-I", "-S", f"/dev/fd/{source.fileno()}"], pass_fds=(source.fileno(),),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            cwd="/", env=env, user=buffer.owner_uid, group=buffer.owner_gid,
            extra_groups=_groups(buffer.owner_uid, buffer.owner_gid))
    proc.stdin.buffer.write(plan)
    proc.stdin.close()
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
    # the copier's JSON carries a name's bytes as \udcXX surrogates: escaped here, once
    if "error" in result:
        raise UserError(f"stage_{direction} failed: {escape(result['error'])}")
    if rc != 0 or not result.get("done"):
        raise InternalError(f"stage_{direction}: the copier ended with exit {rc}: "
                            f"{escape((stderr.strip().splitlines() or ['no output'])[-1])}")
    meter.done()
