"""The steps of a buffer's life, Slurm's functions run in slurmscriptd: setup and
create_persistent make one; data_in and data_out (`stage`), pre_run, post_run and teardown take
a job's buffer through its states, each in the order of its own steps. Handlers as
slurm_functions.py's: `(call, settings, store) -> stdout`, named by the command table.

Each returns once dacd has done its part (`jobs.wait_for`), and those of a job's buffer are
idempotent: Slurm runs them again after a slurmctld restart, and slurm_answer.py while etcd is
out of reach (the row's `rides_out`), from the start. setup and create_persistent build a spec
with the pydantic records; the calls after it read and change specs as JSON
(daccore/services/jobs.py says why).
"""

from __future__ import annotations

from daccore.services.slurm_functions import directives
from daccore.settings.cache import ConfigView  # the hooks load the config through it anyway

TYPE_CHECKING = False  # typing's own, without importing typing; mypy: True
if TYPE_CHECKING:
    from typing import Any

    from daccore.rules.directives import Directives
    from daccore.services.slurm_functions import SlurmCall
    from daccore.settings.cache import Json
    from daccore.store import Store

__all__ = ["setup", "create_persistent", "stage", "pre_run", "post_run", "teardown"]

#: Longest setup waits for a persistentdw buffer that does not exist yet (submitted before
#: the job that makes it): burst_buffer/datawarp holds the job until Slurm knows the buffer,
#: burst_buffer/lua cannot, and holds it once setup fails, for its owner to release.
PERSISTENT_WAIT = 30.0


def setup(call: SlurmCall, settings: Json, store: Store) -> str:
    from daccore.records.states import State
    from daccore.rules.trust import check_owner
    from daccore.services import jobs

    assert call.token and call.user is not None and call.groupid is not None, "setup's needs"
    config = ConfigView(settings)
    check_owner(call.user, call.groupid, settings.get("min_owner_uid", 1000))
    found = directives(call, config.lua_directive)
    if call.capacity is not None:
        _agrees_with_slurm(call.capacity, found, config.default_pool, store)
    jobs.await_persistent(store, found, min(config.step_timeout, PERSISTENT_WAIT), call.token)
    _carried_out_by_slurm(store, found, call.user, call.token)
    if jobs.create_job_buffer(
        _allocating(settings, store),
        int(call.token),
        call.user,
        call.groupid,
        found,
        config.default_pool,
        config.own_mgs_pools(),
        settings.get("held_share", 1.0),
    ):
        jobs.wait_for(
            store, call.token, State.CREATED, config.step_timeout, grace=config.restart_grace
        )
    return ""


def _carried_out_by_slurm(store: Store, d: Directives, uid: int, job: str) -> None:
    """UserError, one line, when a create_persistent line's buffer does not exist at setup, or
    a destroy_persistent line's (the caller's) still does. Slurm carries these lines out, not
    dac: burst_buffer/datawarp runs a `#BB` one (`create_persistent`, `teardown --token
    <name>`) before the job's setup and, while a buffer to destroy is attached elsewhere, keeps
    the job pending with teardown's refusal as its reason and asks again; burst_buffer/lua
    runs none. Going on, the job would end well with the buffer neither made nor destroyed and
    nothing said (issue 45); refused, Slurm holds it with this line. Another user's buffer is
    left to validate's refusal, which names no attachment."""
    from daccore.errors import UserError

    for c in d.create:
        if store.buffer_json(c.name) is None:
            raise UserError(
                f"line {c.line}: create_persistent: persistent buffer '{c.name}' does not "
                "exist: Slurm did not create it (burst_buffer/lua never does): create it "
                f"(dacctl create-persistent --name {c.name} --capacity SIZE) and release the "
                f"job (scontrol release {job})"
            )
    for x in d.destroy:
        buf = store.buffer_json(x.name)
        if buf is None or uid not in (0, buf.get("owner_uid")):
            continue
        attached = sorted(buf.get("attachments") or {})
        why = (
            f"it is attached to job {', '.join(attached)}; once no job uses it, destroy it"
            if attached
            else "Slurm did not destroy it (burst_buffer/lua never does): destroy it"
        )
        raise UserError(
            f"line {x.line}: destroy_persistent: persistent buffer '{x.name}' still exists: "
            f"{why} (dacctl destroy-persistent {x.name}) and release the job (scontrol "
            f"release {job})"
        )


def _agrees_with_slurm(capacity: str, d: Directives, default_pool: str | None, store: Any) -> None:
    """setup's `--capacity POOL:SIZE`, what Slurm accounts for the job, checked against the
    script as dac reads it; AdminError naming both when they disagree. Slurm's size may be
    more than the jobdw's capacity (it rounds up to a pool's granularity; burst_buffer/datawarp
    adds `#DW swap`, burst_buffer/lua every line's `capacity=`), never less; its pool is the
    jobdw's (burst_buffer/lua: the last `capacity=` line's, so a script that also creates a
    persistent buffer is checked on its size alone). A Slurm that accounts a buffer the script
    holds no jobdw for (nor a create_persistent) reads directives dac does not. `store`: what
    gives the pools (`pools()`), read only when neither the jobdw nor the config names one."""
    from daccore.errors import AdminError
    from daccore.services.jobs import pick_pool
    from daccore.services.slurm_args import capacity as pool_size
    from daccore.units import format_size

    pool, size = pool_size(capacity)
    jobdw = d.jobdw
    if jobdw is None:
        if size and not d.create:
            raise AdminError(
                f"setup: Slurm accounts --capacity {capacity} for the job, but dac reads no "
                "jobdw in its script: dac.yaml's lua_directive must be burst_buffer.conf's "
                "Directive"
            )
        return
    ours = pick_pool(
        jobdw.pool, default_pool, [] if jobdw.pool or default_pool else [*store.pools()]
    )
    if size < jobdw.capacity:
        why = "Slurm accounts less than dac would allocate"
    elif pool != ours and not d.create:
        why = (
            "a different pool: burst_buffer.conf's DefaultPool and dac.yaml's default_pool "
            "must name the same one"
        )
    else:
        return
    raise AdminError(
        f"setup: Slurm's --capacity {capacity} disagrees with the script's jobdw (line "
        f"{jobdw.line}: {format_size(jobdw.capacity)} in pool '{ours}'): {why}"
    )


def create_persistent(call: SlurmCall, settings: Json, store: Store) -> str:
    from daccore.errors import UserError
    from daccore.records.states import State
    from daccore.rules.directives import PERSISTENT_NAME
    from daccore.rules.trust import check_owner
    from daccore.services import jobs
    from daccore.units import parse_size

    name, capacity = call.token, call.capacity
    assert name and call.user is not None and capacity, "create_persistent's needs"
    config = ConfigView(settings)
    if not PERSISTENT_NAME.match(name):
        raise UserError(
            f"create_persistent: name '{name}' must start with a letter and "
            "contain only letters, digits, _ . -"
        )
    access, type_ = call.access or "striped", call.type or "scratch"
    if type_ != "scratch":  # the access mode is jobs.create_persistent's to judge
        raise UserError(f"create_persistent: type '{type_}' must be scratch")
    pool, _, size = capacity.rpartition(":")
    try:
        parsed = parse_size(size)
    except ValueError as e:
        raise UserError(f"create_persistent: capacity {e}") from None
    gid = (
        call.groupid
        if call.groupid is not None
        else _primary_gid(call.user, settings["min_owner_uid"])
    )
    check_owner(call.user, gid, settings["min_owner_uid"])
    jobs.create_persistent(
        _allocating(settings, store),
        name,
        call.user,
        gid,
        parsed,
        pool or None,
        access,
        type_,
        config.default_pool,
        config.own_mgs_pools(),
        settings.get("persistent_caps"),
        settings.get("held_share", 1.0),
    )
    jobs.wait_for(store, name, State.CREATED, config.step_timeout, grace=config.restart_grace)
    return f"created {name}"


def _allocating(settings: Json, store: Store) -> Store:
    """The store an allocation reads and claims through: the configured transport (gRPC by
    default), not the gateway the other calls use. Placement's reads are ~1,000 small ranges
    at 1,000 servers, which etcd's JSON gateway costs ~60 ms of etcd's CPU a setup and gRPC a
    fraction of (bench/scale.py): etcd is shared by every call, the ~150 ms of importing gRPC
    is this process's alone."""
    from daccore.store import Store

    if settings["etcd"]["transport"] == "http":
        return store
    return Store.from_dict(settings["etcd"])


def _primary_gid(uid: int, minimum: int) -> int:
    """Slurm's create_persistent passes no group: the owner's primary one, as DataWarp did."""
    import pwd

    from daccore.services.slurm_args import Refused, owner_id

    try:
        gid = pwd.getpwuid(uid).pw_gid
    except KeyError:
        raise Refused(f"create_persistent: uid {uid} has no account here, so no group") from None
    return owner_id(gid, "the owner's group", minimum)


def stage(call: SlurmCall, settings: Json, store: Store) -> str:
    """data_in, data_out: the buffer's desired state staged_in, staged_out, and the wait."""
    from daccore.records.states import State
    from daccore.services import jobs

    assert call.token is not None, "a stage needs --token (its row's needs)"
    config = ConfigView(settings)
    state = State.STAGED_IN if call.function == "data_in" else State.STAGED_OUT
    if jobs.set_desired(store, call.token, state, retry=True):
        jobs.wait_for(store, call.token, state, config.stage_timeout, grace=config.restart_grace)
    return ""


def pre_run(call: SlurmCall, settings: Json, store: Store) -> str:
    """Mount the job's buffer and the persistent buffers it attaches on its nodes."""
    from daccore.errors import UserError
    from daccore.records import buffer_doc
    from daccore.records.states import State
    from daccore.services import jobs
    from daccore.services.slurmjob import job_nodes
    from daccore.units import format_size

    assert call.token is not None, "pre_run needs --token (its row's needs)"
    config, job = ConfigView(settings), call.token
    buf = store.buffer_json(job)
    persistent = (
        buf["request"].get("persistent", [])
        if buf
        else (directives(call, config.lua_directive).persistent if call.job else [])
    )
    if buf is None and not persistent:
        return ""  # nothing of dac's in this job
    nodes = job_nodes(job, call.files.nodes, call.nodes)
    swap = buf["request"].get("swap", 0) if buf else 0
    if buf is not None and swap * len(nodes) > buffer_doc.size(buf):
        raise UserError(
            f"swap: {len(nodes)} nodes x {format_size(swap)} of swap is more than "
            f"the buffer holds ({format_size(buffer_doc.size(buf))})"
        )
    jobs.attach(store, job, nodes, persistent)
    if buf is not None:
        jobs.attach(store, job, nodes, [job], State.MOUNTED)
        jobs.wait_for(
            store, job, State.MOUNTED, config.step_timeout, job, grace=config.restart_grace
        )
    for name in persistent:
        jobs.wait_for(
            store, name, State.CREATED, config.step_timeout, job, grace=config.restart_grace
        )
    return ""


def post_run(call: SlurmCall, settings: Json, store: Store) -> str:
    """Unmount the job's buffers from its nodes (the job buffer stays for stage-out)."""
    from daccore.records.states import State
    from daccore.services import jobs

    assert call.token is not None, "post_run needs --token (its row's needs)"
    config, job = ConfigView(settings), call.token
    persistent = jobs.attached_by(store, job)
    jobs.detach(store, job, persistent)
    if store.buffer_json(job) is not None:
        jobs.detach(store, job, [job], State.UNMOUNTED)
        jobs.wait_for(
            store, job, State.UNMOUNTED, config.step_timeout, job, grace=config.restart_grace
        )
    for name in persistent:
        jobs.wait_for(
            store, name, State.CREATED, config.step_timeout, job, grace=config.restart_grace
        )
    return ""


def teardown(call: SlurmCall, settings: Json, store: Store) -> str:
    """A job's end (its buffer and any attachments go) or, for a persistent buffer's name,
    destroy_persistent. A job that ran but whose data_out never came is staged out first,
    unless --hurry; a failed stage-out fails the teardown and keeps the buffer (Slurm holds the
    job; `scancel --hurry` then tears it down)."""
    from daccore.records.states import State
    from daccore.services import jobs

    assert call.token is not None, "teardown needs --token (its row's needs)"
    config, token = ConfigView(settings), call.token
    current = store.buffer_json(token)
    if current is not None and current.get("persistent"):
        jobs.destroy(store, token)
        jobs.wait_for(store, token, State.DELETED, config.step_timeout, grace=config.restart_grace)
        return ""
    persistent = jobs.attached_by(store, token)  # pre_run failed, or post_run never came
    jobs.detach(store, token, persistent)
    if current is not None and not call.hurry and jobs.needs_stage_out(store, current):
        jobs.detach(store, token, [token], State.STAGED_OUT)
        jobs.set_desired(store, token, State.STAGED_OUT, retry=True)  # after a failed one
        jobs.wait_for(
            store, token, State.STAGED_OUT, config.stage_timeout, grace=config.restart_grace
        )
    # a delete that failed (a mount of the buffer left elsewhere) runs again at Slurm's retry
    jobs.set_desired(store, token, State.DELETED, retry=True)
    jobs.wait_for(store, token, State.DELETED, config.step_timeout, grace=config.restart_grace)
    for name in persistent:
        jobs.wait_for(
            store, name, State.CREATED, config.step_timeout, token, grace=config.restart_grace
        )
    return ""
