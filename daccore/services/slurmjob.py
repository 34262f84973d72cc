"""What dac asks Slurm about a job: its compute nodes, and the job array a task belongs to.

burst_buffer/datawarp hands pre_run a file of node names (--nodehostnamefile); burst_buffer/lua
from 23.02 the job's node list (job_info.nodes, a hostlist such as node[1-2]: --nodes), expanded
here; before 23.02 it passes none, so then we ask slurmctld (pre_run runs in slurmscriptd,
outside slurmctld's locks, after the nodes are allocated), with the scontrol on PATH: the one
slurmctld's own environment gives, so the same release. A job array's task whose script
Slurm 24.11+ never wrote is found the array's the same way (slurm_args.py). argv lists
only: no shell.
"""

from __future__ import annotations

import os
import re
import subprocess

from daccore.errors import AdminError

__all__ = ["job_nodes", "expand_hostlist", "array_job_id"]

_NODE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$")
_RANGE = re.compile(r"([0-9]{1,9})(?:-([0-9]{1,9}))?")
#: more names than this in one hostlist is not a node list Slurm made
_MAX_NODES = 100_000


def expand_hostlist(hostlist: str) -> list[str]:
    """Slurm's compressed hostlist (`node[1-3,07],login1`, `r[1-2]n[01-02]`) as names, in
    order; AdminError for anything else (it came from Slurm: a bad one is Slurm's or an
    admin's matter)."""
    names: list[str] = []
    for item in _split_top(hostlist):
        expanded = [""]
        for literal, ranges in re.findall(r"([^\[\]]*)(?:\[([^\[\]]*)\])?", item):
            choices = [literal]
            if ranges:
                choices = [literal + n for n in _numbers(ranges, hostlist)]
            expanded = [e + c for e in expanded for c in choices]
            if len(expanded) > _MAX_NODES:
                raise AdminError(f"node list {hostlist!r}: more than {_MAX_NODES} nodes")
        names += expanded
    return names


def _split_top(hostlist: str) -> list[str]:
    """Split at the commas outside brackets."""
    items, depth, start = [], 0, 0
    for i, ch in enumerate(hostlist):
        depth += {"[": 1, "]": -1}.get(ch, 0)
        if depth not in (0, 1):
            raise AdminError(f"node list {hostlist!r}: unbalanced brackets")
        if ch == "," and depth == 0:
            items.append(hostlist[start:i])
            start = i + 1
    if depth:
        raise AdminError(f"node list {hostlist!r}: unbalanced brackets")
    return [i for i in items + [hostlist[start:]] if i]


def _numbers(ranges: str, hostlist: str) -> list[str]:
    out: list[str] = []
    for part in ranges.split(","):
        m = _RANGE.fullmatch(part)
        if not m:
            raise AdminError(f"node list {hostlist!r}: bad range {part!r}")
        lo, hi = m.group(1), m.group(2) or m.group(1)
        if int(hi) < int(lo) or int(hi) - int(lo) >= _MAX_NODES:
            raise AdminError(f"node list {hostlist!r}: bad range {part!r}")
        width = len(lo) if lo.startswith("0") else 0
        out += [str(n).zfill(width) for n in range(int(lo), int(hi) + 1)]
    return out


def job_nodes(
    job_id: str, hostfile: str | int | None = None, hostlist: str | None = None
) -> list[str]:
    if hostlist:
        names = expand_hostlist(hostlist)
    elif hostfile is not None:
        try:
            if isinstance(hostfile, int):  # the fd slurm_args opened: read it from the start,
                os.lseek(hostfile, 0, os.SEEK_SET)  # as often as the call runs again
            with open(hostfile, closefd=not isinstance(hostfile, int)) as f:
                names = f.read().split()
        except OSError as e:
            raise AdminError(f"cannot read the node file {hostfile}: {e.strerror}") from None
    else:
        found = re.search(r"(?:^|\s)NodeList=(\S+)", _scontrol("show", "job", "-o", job_id))
        if not found or found.group(1) == "(null)":
            raise AdminError(f"job {job_id} has no nodes yet (scontrol show job)")
        names = _scontrol("show", "hostnames", found.group(1)).split()
    nodes = list(dict.fromkeys(names))  # keep order, drop repeats
    bad = [n for n in nodes if not _NODE.match(n)]
    if bad or not nodes:
        raise AdminError(f"job {job_id}: unusable node names {bad or nodes!r}")
    return nodes


def array_job_id(job_id: str) -> str | None:
    """The id of the job array whose task `job_id` is (scontrol's ArrayJobId), or None: not a
    task, or scontrol cannot say (the caller's own error then stands)."""
    try:
        out = _scontrol("show", "job", "-o", job_id)
    except AdminError:
        return None
    found = re.search(r"(?:^|\s)ArrayJobId=([1-9][0-9]{0,9})(?:\s|$)", out)
    return found.group(1) if found and found.group(1) != job_id else None


def _scontrol(*args: str) -> str:
    try:
        r = subprocess.run(["scontrol", *args], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise AdminError(f"scontrol {' '.join(args)}: {e}") from None
    if r.returncode != 0:
        raise AdminError(f"scontrol {' '.join(args)}: {(r.stderr or r.stdout).strip()}")
    return r.stdout
