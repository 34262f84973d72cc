"""The recorded-command site: what every stand-in shares.

Lustre and DAOS cannot run on the test machines, so their playbooks run against stand-ins for
the tools they call (mkfs.lustre, mount, lctl, lfs, dmg, daos, dfuse, setfacl, ...), first on
PATH. Each
stand-in parses its argv with the real tool's grammar, refuses what the real tool would refuse
(exit code and a message in the tool's style on stderr), keeps the site's state (partitions,
formatted targets, mounts, pools, containers) and records every call, accepted or not.

Environment (set by the tests through dac's per-host `dac_environment` inventory variable):

    DAC_SITE_DIR    the site's directory: site.json (facts, written by the test), state.json,
                    commands.jsonl (the record), faults.json (optional failures to inject)
    DAC_SITE_HOST   the inventory host the command runs on (every host runs on this machine)

site.json:  {"hosts": {"<host>": {"nid": "<nid>", "ranks": [0, 1]}}, "users": {...}}
            (device placeholder files are real files; a stand-in checks they exist)
faults.json: [{"tool": "mkfs.lustre", "host": "dac2" (optional), "contains": ["--ost"],
               "rc": 1, "stderr": "..."}]  the first call that matches fails that way, once.

Stand-ins are Python modules in this directory; bin/<tool> are symlinks to bin/standin, which
dispatches on its own name through TOOLS.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import sys
from typing import Callable, Iterator

__all__ = ["Site", "Refused", "register", "main", "TOOLS", "holders"]

#: tool name -> handler(site, args) -> exit code (0 when accepted)
TOOLS: dict[str, Callable[["Site", list[str]], int]] = {}


class Refused(Exception):
    """What the real tool would refuse: its message (without the tool's prefix) and exit code.

    ``whole=True``: the message is the tool's entire stderr, printed without the "<tool>: "
    prefix (Go tools print "ERROR: dmg: ...", dfuse reports on its own terms).
    """

    def __init__(self, message: str, rc: int = 1, *, whole: bool = False):
        super().__init__(message)
        self.message, self.rc, self.whole = message, rc, whole


def register(*names: str):
    def add(fn):
        for name in names:
            TOOLS[name] = fn
        return fn

    return add


class Site:
    def __init__(self, directory: str, host: str, tool: str):
        self.dir, self.host, self.tool = directory, host, tool
        self._lock_fd: int | None = None

    @property
    def facts(self) -> dict:
        with open(os.path.join(self.dir, "site.json")) as f:
            return json.load(f)

    def host_facts(self, host: str | None = None) -> dict:
        host = host or self.host
        try:
            return self.facts["hosts"][host]
        except KeyError:
            raise Refused(f"{host}: not a host of this site") from None

    @contextlib.contextmanager
    def state(self) -> Iterator[dict]:
        """The site's state, read and written under one lock (calls may run in parallel)."""
        path = os.path.join(self.dir, "state.json")
        with open(os.path.join(self.dir, "state.lock"), "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                with open(path) as f:
                    state = json.load(f)
            except FileNotFoundError:
                state = {}
            yield state
            tmp = f"{path}.{os.getpid()}"
            with open(tmp, "w") as f:
                json.dump(state, f, indent=1, sort_keys=True)
            os.replace(tmp, path)

    def record(self, args: list[str], rc: int, stderr: str = "") -> None:
        line = json.dumps(
            {
                "host": self.host,
                "uid": os.getuid(),
                "argv": [self.tool, *args],
                "rc": rc,
                **({"stderr": stderr} if stderr else {}),
            }
        )
        with open(os.path.join(self.dir, "commands.jsonl"), "a") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            f.write(line + "\n")

    def fault(self, args: list[str]) -> tuple[int, str] | None:
        """An injected failure for this call, consumed once."""
        path = os.path.join(self.dir, "faults.json")
        if not os.path.exists(path):
            return None
        with self.state():  # the lock, so two calls never take the same fault
            with open(path) as f:
                faults = json.load(f)
            for i, fault in enumerate(faults):
                if (
                    fault.get("tool") == self.tool
                    and fault.get("host", self.host) == self.host
                    and all(any(c in a for a in args) for c in fault.get("contains", []))
                ):
                    del faults[i]
                    with open(path, "w") as f:
                        json.dump(faults, f)
                    return fault.get("rc", 1), fault.get("stderr", f"{self.tool}: injected failure")
        return None


def holders(directory: str) -> dict[int, str]:
    """The processes of this machine using `directory` or anything below it, with the path each
    holds: a cwd, a root or an open file there. Each of those holds a reference on the mount it
    is in (fs/fs_struct.c, fs/file_table.c), and those are what make the kernel refuse a plain
    unmount EBUSY (fs/namespace.c do_umount(): propagate_mount_busy()); a lazy unmount
    (MNT_DETACH) detaches the mount all the same. The stand-ins' mounts are real directories
    and links (nothing is mounted), so the references are read from /proc; a process this one
    may not inspect (another user's, for a stand-in run as a user) is not seen."""
    top = os.path.realpath(directory)
    below, found, me = top.rstrip("/") + "/", {}, os.getpid()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        if int(pid) == me:
            continue
        links = [f"/proc/{pid}/cwd", f"/proc/{pid}/root"]
        try:
            links += [f"/proc/{pid}/fd/{fd}" for fd in os.listdir(f"/proc/{pid}/fd")]
        except OSError:
            pass
        for link in links:
            try:
                held = os.readlink(link)
            except OSError:
                continue
            if held == top or held.startswith(below):
                found[int(pid)] = held
                break
    return found


def main(argv: list[str]) -> int:
    import acl_tools  # noqa: F401
    import daos_tools  # noqa: F401
    import lustre_tools  # noqa: F401  (each registers its tools)

    tool = os.path.basename(argv[0])
    args = argv[1:]
    directory, host = os.environ.get("DAC_SITE_DIR"), os.environ.get("DAC_SITE_HOST")
    if not directory or not host or tool not in TOOLS:
        print(
            f"{tool}: stand-in called outside a recorded-command site "
            "(DAC_SITE_DIR and DAC_SITE_HOST unset, or no such tool)",
            file=sys.stderr,
        )
        return 127
    site = Site(directory, host, tool)
    injected = site.fault(args)
    if injected is not None:
        rc, stderr = injected
        print(stderr, file=sys.stderr)
        site.record(args, rc, stderr)
        return rc
    try:
        rc = TOOLS[tool](site, args)
    except Refused as e:
        message = e.message if e.whole else f"{tool}: {e.message}"
        print(message, file=sys.stderr)
        site.record(args, e.rc, message)
        return e.rc
    site.record(args, rc)
    return rc
