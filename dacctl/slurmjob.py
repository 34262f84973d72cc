"""What dac asks Slurm about a running job: its compute nodes.

burst_buffer/datawarp hands pre_run a file of node names (--nodehostnamefile); burst_buffer/lua
before 23.02 passes none, so then we ask slurmctld (pre_run runs in slurmscriptd, outside
slurmctld's locks, after the nodes are allocated). argv lists only: no shell.
"""

from __future__ import annotations

import re
import subprocess

from daccore.errors import AdminError

__all__ = ["job_nodes"]

_NODE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$")


def job_nodes(job_id: str, hostfile: str | None = None) -> list[str]:
    if hostfile:
        try:
            with open(hostfile) as f:
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


def _scontrol(*args: str) -> str:
    try:
        r = subprocess.run(["scontrol", *args], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise AdminError(f"scontrol {' '.join(args)}: {e}") from None
    if r.returncode != 0:
        raise AdminError(f"scontrol {' '.join(args)}: {(r.stderr or r.stdout).strip()}")
    return r.stdout
