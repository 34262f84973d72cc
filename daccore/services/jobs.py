"""What a Slurm job asks of dac, from validation to the paths it sees.

The Slurm functions (`dacctl --function …`) are thin wrappers over these: they change a
buffer's spec (desired state, attachments) and wait for dacd to reach it.
"""

from __future__ import annotations

import threading
import time

from daccore.errors import CapacityError, NotFound, UserError
from daccore.records import buffer_doc
from daccore.records.states import State
from daccore.rules.directives import Directives
from daccore.rules.inventory import summarize
from daccore.units import format_size

TYPE_CHECKING = False  # typing's own, without importing typing on the hooks' path; mypy: True
if TYPE_CHECKING:
    from typing import Any, Callable

    from daccore.records.buffer_doc import Doc
    from daccore.records.models import Allocation, Buffer, BufferRequest
    from daccore.rules.inventory import Inventory, PoolSummary
    from daccore.store import Store

    #: a change `_update` applies: the new field values of a spec (JSON), or None for none
    SpecChange = Callable[[Doc], Doc | None]

__all__ = [
    "pick_pool",
    "validate",
    "await_persistent",
    "create_job_buffer",
    "within_held_share",
    "create_persistent",
    "set_desired",
    "attach",
    "detach",
    "needs_stage_out",
    "destroy",
    "wait_for",
    "paths_for",
]


def pick_pool(requested: str | None, default: str | None, pools: list[str]) -> str:
    """The pool a request lands in: the one asked for, else the site default, else the only one."""
    if requested:
        return requested
    if default:
        return default
    if len(pools) == 1:
        return pools[0]
    raise UserError(f"name a pool with pool=<name> (pools: {', '.join(sorted(pools)) or 'none'})")


def validate(
    store: Store,
    d: Directives,
    default_pool: str | None,
    uid: int | None = None,
    at_setup: bool = False,
) -> None:
    """Everything a user can get wrong before the job queues; raises UserError with one line.
    `at_setup`: burst_buffer/datawarp has already run the script's create_persistent or
    destroy_persistent (it does so before setup), so that buffer existing (the job owner's),
    or being gone, is no error then. A persistentdw buffer that does not exist yet is no
    error at submission: the job waits for it (Slurm's datawarp plugin holds it until the
    buffer exists; setup waits for it, `await_persistent`), as Slurm's own tests expect."""
    if d.empty:
        return
    inventory = store.summary_inventory()
    summaries = {s.name: s for s in summarize(inventory)}
    requests = [(d.jobdw.line, "jobdw", d.jobdw.pool, d.jobdw.capacity)] if d.jobdw else []
    requests += [(c.line, "create_persistent", c.pool, c.capacity) for c in d.create]
    for line, directive, pool, capacity in requests:
        try:
            name = pick_pool(pool, default_pool, list(summaries))
        except UserError as e:
            raise UserError(f"line {line}: {directive}: {e}") from None
        s = summaries.get(name)
        if s is None:
            raise NotFound(
                f"line {line}: {directive}: unknown pool '{name}' (pools: "
                f"{', '.join(sorted(summaries)) or 'none'})"
            )
        total = s.total * s.granularity
        if capacity > total:
            raise CapacityError(
                f"line {line}: {directive}: capacity {format_size(capacity)} "
                f"is more than pool '{name}' holds ({format_size(total)})"
            )
        _check_one_host(line, directive, capacity, name, inventory, s.granularity)
        if directive == "jobdw" and d.jobdw:
            _check_access(line, d.jobdw.access, s)
            if d.swap:
                _check_swap(d, s, capacity)
    if d.persistent or d.create or d.destroy:
        buffers = store.buffer_owners()
        for line, name in zip(d.persistent_lines, d.persistent, strict=True):
            owner = buffers.get(name)
            if owner is None and not at_setup:
                continue
            if owner is None:
                raise NotFound(f"line {line}: persistentdw: no persistent buffer named '{name}'")
            if uid is not None and owner != uid:
                raise UserError(
                    f"line {line}: persistentdw: persistent buffer '{name}' belongs to another user"
                )
        for x in d.destroy:
            owner = buffers.get(x.name)
            if owner is None and at_setup:
                continue
            if owner is None:
                raise NotFound(
                    f"line {x.line}: destroy_persistent: no persistent buffer named '{x.name}'"
                )
            if uid is not None and uid not in (0, owner):
                raise UserError(
                    f"line {x.line}: destroy_persistent: buffer '{x.name}' belongs to another user"
                )
        for c in d.create:
            if c.name in buffers and not (at_setup and buffers[c.name] == uid):
                raise UserError(
                    f"line {c.line}: create_persistent: a buffer named '{c.name}' already exists"
                )


def await_persistent(store: Store, d: Directives, timeout: float, job: str) -> None:
    """Until every persistent buffer the job attaches exists (one named by a persistentdw
    submitted before the job that makes it), at most `timeout` seconds; then UserError: the
    job is held, for its owner to release once the buffer is there."""
    deadline = time.monotonic() + timeout
    while True:
        owners = store.buffer_owners()
        missing = [
            (line, name)
            for line, name in zip(d.persistent_lines, d.persistent, strict=True)
            if name not in owners
        ]
        if not missing:
            return
        if time.monotonic() >= deadline:
            line, name = missing[0]
            raise NotFound(
                f"line {line}: persistentdw: no persistent buffer named '{name}' "
                f"yet (waited {timeout:.0f}s); create it, then release the job "
                f"(scontrol release {job})"
            )
        time.sleep(min(1.0, max(0.0, deadline - time.monotonic())))


def _check_one_host(
    line: int, directive: str, capacity: int, pool: str, inventory: Inventory, granularity: int
) -> None:
    """A pool that keeps a buffer on one host (single_host) can never place one bigger than
    its biggest host holds, up or not: refused now, not by setup once the job has queued and
    Slurm has set the capacity aside for it."""
    info = inventory.pools.get(pool)
    if info is None or info.placement != "single_host":
        return
    most = max((v.pools.get(pool, 0) for v in inventory.views()), default=0) * granularity
    if capacity > most:
        raise CapacityError(
            f"line {line}: {directive}: capacity {format_size(capacity)} is "
            f"more than one host of pool '{pool}' holds ({format_size(most)}), "
            "and the pool keeps a buffer on one host"
        )


def _check_access(line: int, access: str, pool: PoolSummary) -> None:
    from daccore.backends import unservable

    why = unservable(pool.backend, 0, 0, access)
    if why:
        raise UserError(
            f"line {line}: jobdw: access_mode={access}: pool '{pool.name}' cannot serve it: {why}"
        )


def _check_swap(d: Directives, pool: PoolSummary, capacity: int) -> None:
    from daccore.backends import unservable

    line = d.swap_line
    if not pool.swap:
        raise UserError(
            f"line {line}: swap: pool '{pool.name}' does not offer swap (the site turned it off)"
        )
    if d.swap > capacity:
        raise UserError(
            f"line {line}: swap: {format_size(d.swap)} per node is more than the "
            f"buffer's capacity {format_size(capacity)}"
        )
    why = unservable(pool.backend, -(-capacity // pool.granularity), d.swap)
    if why:
        raise UserError(
            f"line {line}: swap: {why}; ask for at most "
            f"{format_size(pool.granularity)} or drop the swap line"
        )


def _buffer(
    name: str,
    uid: int,
    gid: int,
    job_id: int | None,
    persistent: bool,
    request: BufferRequest,
    allocation: Allocation,
) -> Buffer:
    from daccore.records.models import Buffer

    return Buffer(
        name=name,
        owner_uid=uid,
        owner_gid=gid,
        job_id=job_id,
        persistent=persistent,
        request=request,
        allocation=allocation,
        created_at=time.time(),
    )


def create_job_buffer(
    store: Store,
    job_id: int,
    uid: int,
    gid: int,
    d: Directives,
    default_pool: str | None,
    own_mgs_pools: frozenset[str] = frozenset(),
    held_share: float = 1.0,
) -> bool:
    """Allocate the job's jobdw buffer (named after the job). False when the job has none.
    Idempotent: Slurm may run setup again after a slurmctld restart. A buffer in one of
    `own_mgs_pools` (DacConfig.own_mgs_pools) also takes its primary host's MGS slot;
    `held_share`: DacConfig.held_share (`within_held_share`)."""
    from daccore.records.models import BufferRequest, StageRequest
    from daccore.services.buffers import allocate_buffer

    validate(store, d, default_pool, uid, at_setup=True)
    if d.jobdw is None:
        return False
    name = str(job_id)
    existing = store.buffer(name)
    if existing is not None:
        return True
    pool = pick_pool(d.jobdw.pool, default_pool, list(store.pools()))
    stages = {
        k: [StageRequest(type=s.type, source=s.source, destination=s.destination) for s in v]
        for k, v in (("in", d.stage_in), ("out", d.stage_out))
    }
    request = BufferRequest(
        capacity=d.jobdw.capacity,
        pool=pool,
        access=d.jobdw.access,
        type=d.jobdw.type,
        swap=d.swap,
        stage_in=stages["in"],
        stage_out=stages["out"],
        persistent=d.persistent,
    )
    within_held_share(store, uid, pool, d.jobdw.capacity, held_share)
    allocate_buffer(
        store,
        lambda a: _buffer(name, uid, gid, job_id, False, request, a),
        capacity=d.jobdw.capacity,
        pool=pool,
        own_mgs=pool in own_mgs_pools,
    )
    import logging  # not at the top: validate() runs inside slurmctld and needs no logging

    logging.getLogger(__name__).info(
        "buffer %s allocated for job %s (%s in %s)",
        name,
        job_id,
        format_size(d.jobdw.capacity),
        pool,
    )
    return True


def create_persistent(
    store: Store,
    name: str,
    uid: int,
    gid: int,
    capacity: int,
    pool: str | None,
    access: str,
    type_: str,
    default_pool: str | None,
    own_mgs_pools: frozenset[str] = frozenset(),
    caps: dict[str, Any] | None = None,
    held_share: float = 1.0,
) -> None:
    """Allocate persistent buffer `name` for `uid`:`gid`, within `caps` (the config's
    persistent_caps as a dict, as every command passes it; None: no caps), checked and
    allocated under the owner's lock in etcd so that parallel creates never pass a cap
    together."""
    from daccore.records.bounds import MAX_BYTES
    from daccore.records.models import BufferRequest
    from daccore.services.buffers import allocate_buffer

    if access != "striped":
        raise UserError(
            f"create_persistent: access '{access}': persistent buffers are striped "
            "(every attaching job sees one directory)"
        )
    if type_ != "scratch":  # as the directive grammar says
        raise UserError(f"create_persistent: type '{type_}' is not supported; use scratch")
    if capacity > MAX_BYTES:  # a record's bound, refused here rather than by its model
        raise CapacityError(
            f"create_persistent: capacity {format_size(capacity)} is more than any pool holds"
        )
    pool = pick_pool(pool, default_pool, list(store.pools()))
    request = BufferRequest(capacity=capacity, pool=pool, access=access, type=type_)

    def allocate() -> None:
        within_held_share(store, uid, pool, capacity, held_share)
        allocate_buffer(
            store,
            lambda a: _buffer(name, uid, gid, None, True, request, a),
            capacity=capacity,
            pool=pool,
            own_mgs=pool in own_mgs_pools,
        )

    if caps is None:
        allocate()
        return
    with store.owner_lock(uid):
        _within_caps(store, caps, uid, gid, capacity, pool)
        allocate()


def _within_caps(
    store: Store, caps: dict[str, Any], uid: int, gid: int, capacity: int, pool: str
) -> None:
    """UserError naming the cap a new persistent buffer of `capacity` in `pool` would pass for
    its owner or group. Shares are of the pool's capacity on its live hosts. A group's caps
    are kept exactly only between its members' own calls: the lock is per owner."""
    summary = next((s for s in summarize(store.summary_inventory()) if s.name == pool), None)
    if summary is None:
        return  # the allocation says the pool is unknown
    size = -(-capacity // summary.granularity) * summary.granularity
    total = summary.total * summary.granularity
    for who, owner, share, count in (
        (f"uid {uid}", {"uid": uid}, caps["user_share"], caps["user_buffers"]),
        (f"group {gid}", {"gid": gid}, caps["group_share"], caps["group_buffers"]),
    ):
        kind = "user" if "uid" in owner else "group"
        held, used = store.persistent_usage(**owner).get(pool, [0, 0])
        if count and held + 1 > count:
            raise UserError(
                f"create_persistent: {who} holds {held} persistent buffers, the "
                f"most one {kind} may (persistent_caps.{kind}_buffers in dac.yaml): "
                "destroy one first, or ask an admin"
            )
        if share < 1 and used + size > share * total:
            raise UserError(
                f"create_persistent: {who}'s persistent buffers in pool '{pool}' "
                f"would hold {format_size(used + size)} of its "
                f"{format_size(total)}; one {kind} may hold {share:.0%} "
                f"({format_size(int(share * total))}; persistent_caps.{kind}_share "
                "in dac.yaml): destroy one first, or ask an admin"
            )


def within_held_share(store: Store, uid: int, pool: str, capacity: int, share: float) -> None:
    """CapacityError when `uid`'s buffers in `pool` whose teardown failed (held by something
    dac may not end: the owner's own processes passing descriptors around, a mount copied
    into another namespace) and a new one of `capacity` would hold more than `share` of the
    pool. Such a buffer keeps its bricks for as long as its holder lives (issue 45: one user's
    eight jobs, each leaving a descriptor in flight, took every brick and everyone else's jobs
    pended); counted against its owner, it costs that owner, and the rest of the pool stays
    for others. Shares are of the pool's capacity on its live hosts."""
    if share >= 1:
        return
    held: dict[str, int] = {}
    for name, doc in store.buffer_docs().items():
        if (
            doc.get("owner_uid") == uid
            and doc.get("desired_state") == State.DELETED.value
            and (doc.get("request") or {}).get("pool") == pool
            and any(
                _teardown_failed(s, doc.get("generation", 1))
                for s in store.status_docs(name).values()
            )
        ):
            try:
                held[name] = sum(b["capacity"] for b in doc["allocation"]["bricks"])
            except (KeyError, TypeError):
                continue
    if not held:
        return
    summary = next((s for s in summarize(store.summary_inventory()) if s.name == pool), None)
    if summary is None:
        return  # the allocation says the pool is unknown
    total = summary.total * summary.granularity
    size = -(-capacity // summary.granularity) * summary.granularity
    if sum(held.values()) + size > share * total:
        names = ", ".join(sorted(held)[:5]) + (" …" if len(held) > 5 else "")
        raise CapacityError(
            f"pool '{pool}': your buffers {names} still hold "
            f"{format_size(sum(held.values()))}, their teardown failing (dacctl show <name> "
            f"says what holds them); with this one they would pass the "
            f"{share:.0%} of the pool ({format_size(int(share * total))}) one user's such "
            "buffers may hold (held_share in dac.yaml): end what holds them"
        )


def _teardown_failed(status: Doc, generation: int) -> bool:
    """Whether a host's status shows the buffer's delete failing: failed by the one rule
    (`buffer_doc.failed`, at the spec's `generation`), or a delete that failed before and is
    due to run, or runs, again. Not the rule alone: a failed delete is not outgrown by a newer
    spec as another step is (every spec of a buffer in teardown asks for the same delete, and
    Slurm's retry is one), and the run in flight writes its status without the last error; a
    held buffer must not drop out of `within_held_share` for the seconds each retry runs."""
    attempt = status.get("attempt")
    # a step in flight is recorded with its task: "delete: unmount and wipe the filesystem"
    step = str(status.get("step") or "").partition(":")[0]
    return buffer_doc.failed(status, generation) or (
        step == "delete"
        and (bool(status.get("error")) or (isinstance(attempt, int) and attempt > 1))
    )


# From here on a buffer is its spec as plain JSON (Store.buffer_doc): these run in every Slurm
# call after setup, and pydantic would cost each 0.2 s (docs/performance.md).


def _update(store: Store, name: str, change: SpecChange) -> bool:
    """Apply `change(spec) -> dict of new field values (JSON), or None for no change` with
    compare-and-swap, bumping the generation; False when there is no such buffer."""
    from daccore.errors import Conflict

    deleted = State.DELETED.value
    for _ in range(50):
        current = store.buffer_doc(name)
        if current is None:
            return False
        buf = current.record
        fields = change(buf)
        if not fields:
            return True
        if buf["desired_state"] == deleted and (
            fields.get("desired_state", deleted) != deleted
            or len(fields.get("attachments", {})) > len(buf["attachments"])
        ):
            raise UserError(f"buffer '{name}' is being torn down")  # never brought back
        try:
            store.update_buffer_doc(
                {**buf, **fields, "generation": buf["generation"] + 1}, current.mod_revision
            )
            return True
        except Conflict:
            continue
    raise Conflict(f"buffer '{name}' kept changing while updating it")


def set_desired(store: Store, name: str, state: State, retry: bool = False) -> bool:
    """Record the desired state of a buffer; False when there is no such buffer (a job without
    a jobdw, or a teardown Slurm repeats). With `retry`, asking again for the state a host
    failed to reach (a stage into a full filesystem, since freed) records it anew: a new
    generation, which dacd answers by running the failed step again."""

    def change(b: Doc) -> Doc | None:
        if b["desired_state"] != state.value:
            return {"desired_state": state.value}
        if not retry:
            return None
        failed = _failed(store, name, b)
        if failed and state is State.DELETED:
            _backing_off(name, failed)
        return {"desired_state": state.value} if failed else None  # _update bumps the generation

    return _update(store, name, change)


def _failed(store: Store, name: str, b: Doc) -> list[Doc]:
    """The statuses of hosts whose step for the spec's current generation failed
    (`buffer_doc.failed`)."""
    return [s for s in store.status_docs(name).values() if buffer_doc.failed(s, b["generation"])]


#: seconds a retry of a failed delete waits for its run to be due, rather than answer with
#: the last failure (Slurm's retry right after a holder ended gets its run)
SHORT_WAIT = 1.0


def _backing_off(name: str, failed: list[Doc]) -> None:
    """The last failure again, without a new run, while the retry it is owed is not due
    (`daccore.records.lifecycle.retry_after`); one due within SHORT_WAIT is waited for."""
    from daccore.errors import AdminError, InternalError
    from daccore.records.lifecycle import retry_after

    for s in failed:
        attempts, at = s.get("attempt", 1), s.get("updated_at", 0)
        if not isinstance(attempts, int) or not isinstance(at, (int, float)):
            continue
        wait = at + retry_after(attempts) - time.time()
        if 0 < wait <= SHORT_WAIT:
            time.sleep(wait)
        elif wait > 0:
            kind = {"user": UserError, "admin": AdminError}.get(
                s["error"].get("category"), InternalError
            )
            raise kind(
                f"buffer {name}: {s['error'].get('message', '')} (failed {attempts} times; "
                f"the next try is in {wait:.0f} s)"
            )


def _attachment(job: str, nodes: list[str] | None, state: State | None) -> SpecChange:
    """A change for `_update`: the job's attachment becomes `nodes` (None: removed) and, with
    `state`, the desired state too; None when the spec already says so."""

    def change(b: Doc) -> Doc | None:
        if b["attachments"].get(job) == nodes and (
            state is None or b["desired_state"] == state.value
        ):
            return None
        others = {k: v for k, v in b["attachments"].items() if k != job}
        fields = {"attachments": others if nodes is None else {**others, job: list(nodes)}}
        return {**fields, "desired_state": state.value} if state is not None else fields

    return change


def attach(
    store: Store, job: str, nodes: list[str], names: list[str], state: State | None = None
) -> None:
    """Ask for buffers `names` to be mounted on the job's `nodes`; with `state`, also move
    them to it (a job buffer: MOUNTED, in the same change)."""
    from daccore.rules.trust import check_attachment

    check_attachment(job, nodes)  # what dacd would refuse to act on is never written
    for name in names:
        if not _update(store, name, _attachment(job, nodes, state)):
            raise NotFound(f"persistentdw: no persistent buffer named '{name}'")


def detach(store: Store, job: str, names: list[str], state: State | None = None) -> None:
    """Ask for the job's mounts of `names` to go (with `state`, also move them to it)."""
    for name in names:
        _update(store, name, _attachment(job, None, state))


def attached_by(store: Store, job: str) -> list[str]:
    """Persistent buffers that `job` still has attached."""
    return sorted(
        n
        for n, b in store.buffer_docs().items()
        if b.get("persistent") and job in (b.get("attachments") or ())
    )


def needs_stage_out(store: Store, buf: Doc) -> bool:
    """The job ran (its buffer was mounted on its nodes) and has stage_out lines, or stages it
    asked for while it ran (dacd/staging/injob.py: those still running, those at its end), not yet
    done everywhere. A job cancelled before it ran has produced nothing to stage out. (Its
    data_out answers at once when it has no stage_out lines: this teardown stages out then.)"""
    if buf["desired_state"] == State.DELETED.value:
        return False
    if not buf["request"].get("stage_out") and not store.stage_hosts(buf["name"]):
        return False
    reached = [s.get("state") for s in store.status_docs(buf["name"]).values()]
    return bool(reached) and all(
        s is not None and State.MOUNTED.rank <= State(s).rank < State.STAGED_OUT.rank
        for s in reached
    )


def destroy(store: Store, name: str, uid: int | None = None) -> None:
    """Ask for persistent buffer `name` to be deleted; refused while a job has it attached,
    and for anyone but its owner (or root) when the caller is known."""

    def change(b: Doc) -> Doc | None:
        if uid is not None and uid not in (0, b["owner_uid"]):
            raise UserError(f"destroy_persistent: buffer '{name}' belongs to another user")
        if b["attachments"]:
            raise UserError(
                f"destroy_persistent: buffer '{name}' is attached to job "
                f"{', '.join(sorted(b['attachments']))}; destroy it once they end"
            )
        if b["desired_state"] != State.DELETED.value:
            return {"desired_state": State.DELETED.value}
        # asked again after a delete failed (a mount of it left elsewhere): a new generation,
        # which dacd answers by running the delete again, once its retry is due
        failed = _failed(store, name, b)
        if failed:
            _backing_off(name, failed)
        return {"desired_state": State.DELETED.value} if failed else None

    if not _update(store, name, change):
        raise NotFound(f"destroy_persistent: no persistent buffer named '{name}'")


#: seconds a waiting Slurm call gives a storage host whose dacd's lease lapsed to come back,
#: when the caller passes none (DacConfig.restart_grace says why 90)
RESTART_GRACE = 90.0


def wait_for(
    store: Store,
    name: str,
    state: State,
    timeout: float,
    job: str | None = None,
    grace: float = RESTART_GRACE,
) -> None:
    """Return once every host of the buffer has reached `state` (for DELETED: once the buffer
    is gone) and, with `job`, mounts it on exactly the nodes the spec attaches for that job;
    raise the step's error, typed by who must act, or AdminError at the deadline.

    A host whose dacd's lease lapsed (killed, crashed, restarting) is waited for during `grace`
    seconds from when this call first finds it down: a restarted dacd registers again and
    finishes the step, and the call goes on as if nothing happened. Past the grace the call
    fails with one line naming the host and what to do."""
    wake = threading.Event()
    watch = store.wake_on_status(name, wake)
    try:
        _wait(store, name, state, timeout, job, wake, grace)
    finally:
        watch.close()


def _wait(
    store: Store,
    name: str,
    state: State,
    timeout: float,
    job: str | None,
    wake: threading.Event,
    grace: float,
) -> None:
    from daccore.errors import AdminError, InternalError

    errors = {"user": UserError, "admin": AdminError, "internal": InternalError}
    deadline = time.monotonic() + timeout
    down_since: dict[str, float] = {}  # host -> when this call first found it down
    # a status write wakes us; between them, a read at most every 0.25 s (quick at first: the
    # watch may start after the write it should see), so a long stage-in polled by many jobs
    # stays cheap for etcd
    delay = 0.02
    while True:
        wake.clear()
        buf = store.buffer_json(name)
        if buf is None:
            return  # gone: deleted, or a job without a jobdw
        statuses = store.status_docs(name)
        hosts = buffer_doc.hosts(buf)
        now = time.monotonic()
        down = set(hosts) - store.alive_among(hosts)
        down_since = {h: down_since.get(h, now) for h in down}
        behind, late = [], []
        for host in hosts:
            s = statuses.get(host) or {}
            if buffer_doc.failed(s, buf["generation"]):
                error = s["error"]
                raise errors[error["category"]](f"buffer {name}: {error['message']}")
            reached = State(s["state"]) if s.get("state") else None
            done = reached is not None and (
                reached is State.DELETED
                if state is State.DELETED
                else reached is not State.DELETED
                and reached.rank >= state.rank
                and (job is None or s.get("attached", {}).get(job) == buf["attachments"].get(job))
            )
            if not done:
                where = (
                    "down: its dacd's lease lapsed"
                    if host in down
                    else s.get("step") or (reached.value if reached else "")
                )
                behind.append(f"{host} ({where or 'not started'})")
                if host in down and now - down_since[host] >= grace:
                    late.append(host)
        if late:  # a host that already reached the state needs no dacd for this call
            raise AdminError(_down_line(buf, name, state, late, down == set(hosts), grace, job))
        if not behind and state is not State.DELETED:
            return
        if now > deadline:
            raise AdminError(
                f"buffer {name}: not {state.value} within {timeout:.0f}s on "
                f"{', '.join(behind) or 'its hosts'}; is dacd running there?"
            )
        wake.wait(delay)
        delay = min(delay * 1.3, 0.25)


def _down_line(
    buf: Doc,
    name: str,
    state: State,
    late: list[str],
    all_down: bool,
    grace: float,
    job: str | None,
) -> str:
    """The one line of a call that waited `grace` seconds for a host in vain: the host and
    every remedy that works from here (docs/reliability.md tests each)."""
    hosts = ", ".join(late)
    line = (
        f"buffer {name}: storage host {hosts} is down (its dacd's lease lapsed and it did "
        f"not come back within restart_grace, {grace:.0f}s); restart dacd there "
        "(systemctl restart dacd)"
    )
    if state is State.DELETED:
        line += ": it finishes this teardown by itself"
    else:
        owner = job or (str(buf["job_id"]) if buf.get("job_id") is not None else None)
        if owner is not None:
            line += (
                f", then cancel job {owner} (scancel {owner}): its teardown frees the "
                "buffer once dacd is back"
            )
    if all_down:
        line += f"; if the host is gone for good: dacctl forget {name}"
    return line


def paths_for(job: str, access: str, persistent: list[str], mount_root: str) -> list[str]:
    """The KEY=VALUE lines Slurm adds to the job's environment (DataWarp's names)."""
    from daccore.records.layout import mount_path

    modes = access.split(",")
    lines = [
        f"DW_JOB_{kind.upper()}={mount_path(mount_root, job, job, False, kind)}"
        for kind in ("striped", "private")
        if kind in modes
    ]
    lines += [
        f"DW_PERSISTENT_STRIPED_{p}={mount_path(mount_root, job, p, True)}" for p in persistent
    ]
    return lines
