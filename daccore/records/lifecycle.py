"""The next step for a buffer on one host: a pure function of what the spec wants and what the
host has reached. dacd runs the step, records the state it reached, and asks again.

Desired states come in lifecycle order (daccore.records.models.State); a host walks one state at a
time toward the desired one, so a spec that jumps from created to mounted still gets stage_in first.
Teardown (desired DELETED) may come from anywhere and always proceeds, even after a failure, so a
broken buffer can still be cleaned up; a delete that failed runs again once `retry_after` its last
try, less and less often, whether or not anyone asks again. After any other failure the host
waits until the spec changes (a higher generation): Slurm answers a failed step by holding or
tearing down the job; a stage asked for again after it failed comes as a newer spec
(daccore.services.jobs.set_desired).

Mounts on compute nodes follow the spec's attachments (job id -> nodes): the "mount" step
makes the host's mounts match them, mounting what is new and unmounting what is gone. A job
buffer gets its attachment with MOUNTED and loses it with UNMOUNTED; a persistent buffer stays
CREATED while jobs attach and detach, so a change of attachments alone also calls for "mount".
"""

from __future__ import annotations

from daccore.records.models import State

__all__ = ["STEP_FOR", "next_step", "retry_after"]

#: the step that reaches each state
STEP_FOR = {
    State.CREATED: "create",
    State.STAGED_IN: "stage_in",
    State.MOUNTED: "mount",
    State.UNMOUNTED: "unmount",
    State.STAGED_OUT: "stage_out",
    State.DELETED: "delete",
}


def next_step(
    desired: State,
    reached: State | None,
    failed_generation: int | None,
    generation: int,
    mounts_match: bool = True,
) -> tuple[str, State] | None:
    """(step, state it reaches), or None when there is nothing to do now.

    `failed_generation` is the spec generation whose step last failed on this host, if any;
    `mounts_match` says whether the host's mounts already match the spec's attachments.
    """
    if desired is State.DELETED:
        return None if reached is State.DELETED else ("delete", State.DELETED)
    if failed_generation is not None and failed_generation >= generation:
        return None
    if reached is None:
        return STEP_FOR[State.CREATED], State.CREATED
    if reached is State.DELETED:
        return None
    if reached.rank >= desired.rank:
        return None if mounts_match else ("mount", reached)
    target = reached.next()
    assert target is not None  # only DELETED has no next, and it returned above
    return STEP_FOR[target], target


def retry_after(attempts: int) -> float:
    """Seconds from a delete's failure, its `attempts`-th in a row, to its next run: 1, 2, 4 ...
    at most 300. A delete fails while something holds the buffer (issue 45: a descriptor in
    flight no scan finds, another user's namespace); each run costs the host an Ansible run and
    a scan of /proc, and Slurm asks again every few seconds for as long as teardown fails. dacd
    runs it again by itself when due (a holder that ends frees the buffer without anyone
    asking), and a request that comes sooner is answered with the last failure."""
    return float(min(2 ** max(attempts - 1, 0), 300))
