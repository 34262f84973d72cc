"""What a Slurm job asks of dac, from validation to the paths it sees.

The Slurm functions (`dacctl --function …`) are thin wrappers over these. Until the lifecycle
lands in dacd, the state-changing ones record the desired state and return.
"""

from __future__ import annotations

import time

from daccore.directives import Directives
from daccore.errors import CapacityError, NotFound, UserError
from daccore.inventory import summarize
from daccore.units import format_size

__all__ = ["pick_pool", "validate", "create_job_buffer", "create_persistent", "set_desired",
           "wait_for", "paths_for"]


def pick_pool(requested: str | None, default: str | None, pools: list[str]) -> str:
    """The pool a request lands in: the one asked for, else the site default, else the only one."""
    if requested:
        return requested
    if default:
        return default
    if len(pools) == 1:
        return pools[0]
    raise UserError(f"name a pool with pool=<name> (pools: {', '.join(sorted(pools)) or 'none'})")


def validate(store, d: Directives, default_pool: str | None, uid: int | None = None) -> None:
    """Everything a user can get wrong before the job queues; raises UserError with one line."""
    if d.empty:
        return
    summaries = {s.name: s for s in summarize(store.summary_inventory())}
    requests = [(d.jobdw.line, "jobdw", d.jobdw.pool, d.jobdw.capacity)] if d.jobdw else []
    requests += [(c.line, "create_persistent", c.pool, c.capacity) for c in d.create]
    for line, directive, pool, capacity in requests:
        try:
            name = pick_pool(pool, default_pool, list(summaries))
        except UserError as e:
            raise UserError(f"line {line}: {directive}: {e}") from None
        s = summaries.get(name)
        if s is None:
            raise NotFound(f"line {line}: {directive}: unknown pool '{name}' (pools: "
                           f"{', '.join(sorted(summaries)) or 'none'})")
        total = s.total * s.granularity
        if capacity > total:
            raise CapacityError(f"line {line}: {directive}: capacity {format_size(capacity)} "
                                f"is more than pool '{name}' holds ({format_size(total)})")
    if d.persistent or d.create:
        buffers = store.buffer_owners()
        for name in d.persistent:
            owner = buffers.get(name)
            if owner is None:
                raise NotFound(f"persistentdw: no persistent buffer named '{name}'")
            if uid is not None and owner != uid:
                raise UserError(f"persistentdw: persistent buffer '{name}' belongs to another "
                                "user")
        for c in d.create:
            if c.name in buffers:
                raise UserError(f"line {c.line}: create_persistent: a buffer named '{c.name}' "
                                "already exists")


def _buffer(name: str, uid: int, gid: int, job_id: int | None, persistent: bool, request,
            allocation):
    from daccore.models import Buffer
    return Buffer(name=name, owner_uid=uid, owner_gid=gid, job_id=job_id, persistent=persistent,
                  request=request, allocation=allocation, created_at=time.time())


def create_job_buffer(store, job_id: int, uid: int, gid: int, d: Directives,
                      default_pool: str | None) -> bool:
    """Allocate the job's jobdw buffer (named after the job). False when the job has none.
    Idempotent: Slurm may run setup again after a slurmctld restart."""
    from daccore.buffers import allocate_buffer
    from daccore.models import BufferRequest, StageRequest
    validate(store, d, default_pool, uid)
    if d.jobdw is None:
        return False
    name = str(job_id)
    existing = store.buffer(name)
    if existing is not None:
        return True
    pool = pick_pool(d.jobdw.pool, default_pool, list(store.pools()))
    stages = {k: [StageRequest(type=s.type, source=s.source, destination=s.destination)
                  for s in v] for k, v in (("in", d.stage_in), ("out", d.stage_out))}
    request = BufferRequest(capacity=d.jobdw.capacity, pool=pool, access=d.jobdw.access,
                            type=d.jobdw.type, swap=d.swap, stage_in=stages["in"],
                            stage_out=stages["out"], persistent=d.persistent)
    allocate_buffer(store, lambda a: _buffer(name, uid, gid, job_id, False, request, a),
                    capacity=d.jobdw.capacity, pool=pool)
    import logging  # not at the top: validate() runs inside slurmctld and needs no logging
    logging.getLogger(__name__).info("buffer %s allocated for job %s (%s in %s)", name, job_id,
             format_size(d.jobdw.capacity), pool)
    return True


def create_persistent(store, name: str, uid: int, gid: int, capacity: int, pool: str | None,
                      access: str, type_: str, default_pool: str | None) -> None:
    from daccore.buffers import allocate_buffer
    from daccore.models import BufferRequest
    pool = pick_pool(pool, default_pool, list(store.pools()))
    request = BufferRequest(capacity=capacity, pool=pool, access=access, type=type_)
    allocate_buffer(store, lambda a: _buffer(name, uid, gid, None, True, request, a),
                    capacity=capacity, pool=pool)


def set_desired(store, name: str, state) -> bool:
    """Record the desired state of a buffer; False when there is no such buffer (a job without
    a jobdw, or a teardown Slurm repeats)."""
    from daccore.errors import Conflict
    for _ in range(20):
        current = store.buffer(name)
        if current is None:
            return False
        buf = current.record
        if buf.desired_state == state:
            return True
        try:
            store.update_buffer(buf.model_copy(update={"desired_state": state,
                                                       "generation": buf.generation + 1}),
                                current.mod_revision)
            return True
        except Conflict:
            continue
    raise Conflict(f"buffer '{name}' kept changing while setting it to {state.value}")


def wait_for(store, name: str, state, timeout: float) -> None:
    """Return once every host of the buffer has reached `state` (for DELETED: once the buffer
    is gone); raise the step's error, typed by who must act, or AdminError at the deadline."""
    from daccore.errors import AdminError, InternalError
    from daccore.models import State
    errors = {"user": UserError, "admin": AdminError, "internal": InternalError}
    deadline = time.monotonic() + timeout
    delay = 0.05
    while True:
        current = store.buffer(name)
        if current is None:
            return  # gone: deleted, or a job without a jobdw
        buf = current.record
        statuses = store.statuses(name)
        down = sorted(set(buf.allocation.hosts) - store.alive())
        if down:
            raise AdminError(f"buffer {name}: storage host {', '.join(down)} is down (its dacd's "
                             "lease expired); restart dacd there, or tear the job down")
        behind = []
        for host in buf.allocation.hosts:
            s = statuses.get(host)
            if s is not None and s.error is not None and s.generation >= buf.generation:
                raise errors[s.error.category.value](f"buffer {name}: {s.error.message}")
            done = s is not None and s.state is not None and (
                s.state is State.DELETED if state is State.DELETED else
                s.state is not State.DELETED and s.state.rank >= state.rank)
            if not done:
                where = (s.step or (s.state.value if s.state else "")) if s else ""
                behind.append(f"{host} ({where or 'not started'})")
        if not behind and state is not State.DELETED:
            return
        if time.monotonic() > deadline:
            raise AdminError(f"buffer {name}: not {state.value} within {timeout:.0f}s on "
                             f"{', '.join(behind) or 'its hosts'}; is dacd running there?")
        time.sleep(delay)
        delay = min(delay * 1.5, 0.5)


def paths_for(name: str, access: str, persistent: list[str], mount_root: str) -> list[str]:
    """The KEY=VALUE lines Slurm adds to the job's environment (DataWarp's names)."""
    root = mount_root.rstrip("/")
    lines = []
    if "striped" in access.split(","):
        lines.append(f"DW_JOB_STRIPED={root}/{name}/striped")
    if "private" in access.split(","):
        lines.append(f"DW_JOB_PRIVATE={root}/{name}/private")
    lines += [f"DW_PERSISTENT_STRIPED_{p}={root}/{p}/striped" for p in persistent]
    return lines
