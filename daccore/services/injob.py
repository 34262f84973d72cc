"""Stages a running job asks for (issue 36): the user service's `stage-*` verbs, and the
checks that decide who may ask for what.

A stage is asked for from one of the job's nodes, through dac's user service, with a munge
credential (daccore.services.user_client). Before one is recorded, `start` checks:

- the caller (munge's uid) owns the job's buffer, and dac's record says the job runs: the
  buffer is MOUNTED with an attachment for the job naming the asking node (pre_run wrote it
  from Slurm's node list; post_run removes it when the job ends);
- Slurm agrees: `squeue` says the job is RUNNING, for that uid, on that node; and the node's
  address (`sinfo`'s NodeAddr, resolved) is the address munged wrote into the credential
  (ENCODE_HOST: munged sets it, the client cannot). The node's name comes from the client
  (SLURMD_NODENAME) and is believed only within that address: nodes sharing one munged (the
  local DAC's nodes, all on one machine) are told apart by nothing stronger than that;
- the buffer side names the job's own buffer as the job sees it (under <mount_root>/<job>/:
  striped, private, a persistent buffer it attaches); nothing else under mount_root is
  accepted; the other side is a path of the user's, checked by nobody here: the copier,
  running as the user on the buffer's server, opens it with the user's rights, never root's;
- the job has fewer than `injob_open` stages queued or running (the check and the new
  record are one transaction: daccore.store.injob).

Reading, waiting for and cancelling stages needs only the ownership: they change nothing
another user could feel. Root and admins (rights 0) may read and cancel any job's.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import threading
import time
from typing import TYPE_CHECKING, Any

from daccore.errors import AdminError, NotFound, UserError
from daccore.records.bounds import JOB_KEY, MAX_PATH, NAME

if TYPE_CHECKING:
    from typing import Callable

    from daccore.records.models import Buffer, InJobStage, InJobStageStatus
    from daccore.services.user_requests import Caller
    from daccore.settings.config import DacConfig
    from daccore.store import Store

    Stages = list[tuple[InJobStage, InJobStageStatus | None]]

__all__ = [
    "ARGS",
    "REQUIRED",
    "HANDLERS",
    "buffer_side",
    "view",
    "slurm_job",
    "WAIT_MAX",
]

#: seconds one `stage-wait` request waits at most; clients ask again for longer waits
WAIT_MAX = 30.0
#: seconds Slurm's commands may take
SLURM_TIMEOUT = 10.0

_JOB = (str, re.compile(JOB_KEY.strip("^$")))
_NODE = (str, re.compile(NAME.strip("^$")))
_TEXT = (str, None)  # paths and words: checked by the handlers, which say what is wrong
_INT = (int, None)
_BOOL = (bool, None)
_IDS = (list, None)  # stage ids: check_args takes a list only of ints

#: verb -> its arguments (daccore.services.user_requests.check_args checks the types)
ARGS: dict[str, dict[str, tuple[type, re.Pattern[str] | None]]] = {
    "stage-start": {
        "job": _JOB,
        "node": _NODE,
        "direction": _TEXT,
        "type": _TEXT,
        "source": _TEXT,
        "destination": _TEXT,
        "when": _TEXT,
        "revocable": _BOOL,
    },
    "stage-list": {"job": _JOB},
    "stage-status": {"job": _JOB, "id": _INT},
    "stage-wait": {"job": _JOB, "ids": _IDS, "timeout": _INT},
    "stage-cancel": {"job": _JOB, "id": _INT},
}
#: verb -> the arguments it cannot do without (stage-start says itself what it lacks)
REQUIRED: dict[str, tuple[str, ...]] = {
    "stage-list": ("job",),
    "stage-status": ("job", "id"),
    "stage-wait": ("job",),
    "stage-cancel": ("job", "id"),
}


# -- paths ----------------------------------------------------------------------------------------


def _parts(path: object, what: str) -> list[str]:
    if not isinstance(path, str) or not path.startswith("/"):
        raise UserError(f"stage: {what} must be an absolute path")
    # a file name's bytes that are not UTF-8 come as \udc80-\udcff (surrogateescape); any
    # other lone surrogate, which JSON can carry, stands for no byte at all
    try:
        size = len(path.encode(errors="surrogateescape"))
    except UnicodeEncodeError:
        raise UserError(f"stage: {what} is not a path (it holds a lone surrogate)") from None
    if "\0" in path or size > MAX_PATH:
        raise UserError(f"stage: {what} must be a path of at most {MAX_PATH} bytes, no NUL")
    parts = [p for p in path.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise UserError(f"stage: {what} '{path}' must not hold '..'")
    return parts


def buffer_side(
    path: str | None,
    what: str,
    mount_root: str,
    job: str,
    access: list[str],
    persistent: list[str],
    node: str,
) -> tuple[str, str, str] | None:
    """(buffer, part, inner) when `path` names the job's own buffer as its nodes see it
    ($DW_JOB_STRIPED, $DW_JOB_PRIVATE, $DW_PERSISTENT_STRIPED_<name>, or below); None when
    it is outside every buffer (a path of the user's); UserError when it is under the mount
    root but not the job's own buffer."""
    parts, root = _parts(path, what), [p for p in mount_root.split("/") if p]
    if parts[: len(root)] != root:
        return None
    rest = parts[len(root) :]
    if rest[:1] != [job]:
        raise UserError(f"stage: {what} '{path}' is not in this job's buffer")
    kind, inner = (rest[1] if len(rest) > 1 else ""), rest[2:]
    if kind == "striped" and "striped" in access:
        return job, "striped", "/".join(inner)
    if kind == "private" and "private" in access:
        return job, f"private/{node}", "/".join(inner)
    if kind == "persistent" and inner and inner[0] in persistent:
        return inner[0], "striped", "/".join(inner[1:])
    raise UserError(
        f"stage: {what} '{path}' is in none of the job's buffers ($DW_JOB_STRIPED, "
        "$DW_JOB_PRIVATE, $DW_PERSISTENT_STRIPED_<name>)"
    )


# -- Slurm ----------------------------------------------------------------------------------------


def _slurm(config: DacConfig, argv: list[str]) -> str:
    tool = os.path.join(config.slurm_bin, argv[0]) if config.slurm_bin else argv[0]
    env = dict(os.environ)
    if config.slurm_conf:
        env["SLURM_CONF"] = config.slurm_conf
    try:
        r = subprocess.run(
            [tool, *argv[1:]], capture_output=True, text=True, timeout=SLURM_TIMEOUT, env=env
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        raise AdminError(
            f"the user service cannot ask Slurm ({argv[0]}: {e}): an admin must check "
            "slurm_bin and slurm_conf in dac.yaml"
        ) from None
    return r.stdout if r.returncode == 0 else ""


#: seconds a job Slurm showed RUNNING is believed to run without asking again: dac's own record,
#: read at every request, says at once when it ends (post_run takes its attachment away), and a
#: job checkpointing every few seconds asks often (squeue costs slurmctld an RPC each time)
SLURM_FRESH = 30.0
#: seconds a node list's addresses are reused (sinfo's NodeAddr changes with slurm.conf only)
NODES_FRESH = 60.0
_SEEN: dict[str, tuple[float, tuple[str, int, dict[str, set[str]]]]] = {}
_LOCK = threading.Lock()


#: past this share of SLURM_FRESH a RUNNING answer still in use is asked for again in the
#: background, so a job asking often waits for squeue at its first request only (an answer is
#: still never used past SLURM_FRESH; 2 of the 200 acks of bench/injob_staging.py waited, its p99)
SLURM_AHEAD = 0.5
_REFRESHING: set[str] = set()


def slurm_job(config: DacConfig, job: str) -> tuple[str, int, dict[str, set[str]]]:
    """(state, uid, node -> its addresses) of `job` as Slurm has it; ("", -1, {}) when
    Slurm knows no such job. Only fields no user sets are read (squeue's %T %U %N, sinfo's
    %N %o): a job name or comment cannot pose as one. A RUNNING answer is reused for
    SLURM_FRESH seconds (asked for again in the background once SLURM_AHEAD of it passed), a
    node list's addresses for NODES_FRESH."""
    now = time.monotonic()
    with _LOCK:
        seen = _SEEN.get(job)
        if seen is not None and now - seen[0] < SLURM_FRESH:
            if now - seen[0] >= SLURM_FRESH * SLURM_AHEAD and job not in _REFRESHING:
                _REFRESHING.add(job)
                threading.Thread(
                    target=_refresh, args=(config, job), name="squeue", daemon=True
                ).start()
            return seen[1]
    return _ask_slurm(config, job)


def _refresh(config: DacConfig, job: str) -> None:
    try:
        _ask_slurm(config, job)
    except Exception:  # noqa: BLE001 - the next request asks again, and says why
        with _LOCK:
            _SEEN.pop(job, None)
    finally:
        with _LOCK:
            _REFRESHING.discard(job)


def _ask_slurm(config: DacConfig, job: str) -> tuple[str, int, dict[str, set[str]]]:
    now = time.monotonic()
    line = _slurm(config, ["squeue", "-h", "-j", job, "-o", "%T|%U|%N"]).strip()
    fields = line.splitlines()[0].split("|") if line else []
    if len(fields) != 3 or not fields[1].isdigit():
        with _LOCK:
            _SEEN.pop(job, None)
        return "", -1, {}
    state, uid, nodelist = fields[0], int(fields[1]), fields[2]
    nodes = _nodes(config, nodelist, now) if nodelist else {}
    with _LOCK:
        if state == "RUNNING":
            for old in [j for j, (t, _) in _SEEN.items() if now - t >= NODES_FRESH]:
                del _SEEN[old]
            _SEEN[job] = (now, (state, uid, nodes))
        else:
            _SEEN.pop(job, None)
    return state, uid, nodes


_NODES: dict[str, tuple[float, dict[str, set[str]]]] = {}


def _nodes(config: DacConfig, nodelist: str, now: float) -> dict[str, set[str]]:
    with _LOCK:
        known = _NODES.get(nodelist)
        if known is not None and now - known[0] < NODES_FRESH:
            return known[1]
    nodes: dict[str, set[str]] = {}
    for row in _slurm(config, ["sinfo", "-h", "-N", "-n", nodelist, "-o", "%N|%o"]).split():
        name, _, addr = row.partition("|")
        nodes[name] = _addresses(addr)
    with _LOCK:
        if len(_NODES) > 10_000:
            _NODES.clear()
        _NODES[nodelist] = (now, nodes)
    return nodes


def _addresses(addr: str) -> set[str]:
    try:
        return {str(i[4][0]) for i in socket.getaddrinfo(addr, None)}
    except (OSError, UnicodeError):
        return set()


# -- the verbs ------------------------------------------------------------------------------------


def _job_buffer(store: Store, caller: Caller, job: str) -> Buffer | None:
    """The job's buffer record when the caller owns it (or is root or an admin)."""
    current = store.buffer(job)
    if current is None or current.record.persistent:
        return None
    record: Buffer = current.record
    if caller.rights != 0 and record.owner_uid != caller.uid:
        return None
    return record


def _start(
    store: Store,
    config: DacConfig,
    caller: Caller,
    job: str | None,
    node: str | None,
    direction: str | None,
    type: str | None,
    source: str | None,
    destination: str | None,
    when: str | None,
    revocable: bool | None,
) -> dict[str, Any]:
    from daccore.records.models import InJobStage

    if not caller.origin:
        raise UserError("stage: ask from the job's node, through dac's user service")
    if direction not in ("in", "out") or type not in (None, "file", "directory"):
        raise UserError("stage: direction must be in or out, type file or directory")
    if when not in (None, "now", "at_job_end"):
        raise UserError("stage: when must be now or at_job_end")
    if revocable and when != "at_job_end":
        raise UserError("stage: only an at_job_end stage may be revocable")
    if when == "at_job_end" and direction != "out":
        raise UserError("stage: an at_job_end stage goes out of the buffer")
    if job is None or node is None:
        raise UserError("stage: give the job and the node asking (dacctl does, from the job)")
    buf = _job_buffer(store, caller, job)
    not_running = f"no running job {job} of yours with a buffer on node {node}"
    if (
        buf is None
        or buf.owner_uid != caller.uid
        or buf.desired_state.value != "mounted"
        or node not in buf.attachments.get(job, [])
    ):
        raise NotFound(not_running)
    state, uid, nodes = slurm_job(config, job)
    if state != "RUNNING" or uid != caller.uid or node not in nodes:
        raise NotFound(not_running)
    if caller.origin not in nodes[node]:
        raise UserError(
            f"stage: the request comes from {caller.origin}, not from node {node} "
            f"({', '.join(sorted(nodes[node])) or 'no address'}): ask from the job's node"
        )
    access = buf.request.access.value.split(",")
    sides = [
        buffer_side(p, w, config.mount_root, job, access, buf.request.persistent, node)
        for p, w in ((source, "source"), (destination, "destination"))
    ]
    inside = sides[1] if direction == "in" else sides[0]
    if inside is None or sides[0 if direction == "in" else 1] is not None:
        raise UserError(
            f"stage {direction}: the {'destination' if direction == 'in' else 'source'} must "
            f"be in the job's buffer and the {'source' if direction == 'in' else 'destination'} "
            "outside it"
        )
    name, part, inner = inside
    if when == "at_job_end" and name != job:
        raise UserError(
            "stage: at_job_end stages go from the job's own buffer, not a persistent one"
        )
    host = buf.allocation.primary_host
    if name != job:
        other = store.buffer(name)
        if other is None or other.record.owner_uid != caller.uid:
            raise NotFound(f"no persistent buffer '{name}' of yours")
        host = other.record.allocation.primary_host

    def make(id: int) -> InJobStage:
        return InJobStage(
            id=id,
            job=job,
            buffer=name,
            host=host,
            owner_uid=buf.owner_uid,
            owner_gid=buf.owner_gid,
            direction=direction,
            type=type or "file",
            source=source,
            destination=destination,
            part=part,
            inner=inner,
            when=when or "now",
            revocable=bool(revocable),
            node=node,
            created_at=time.time(),
        )

    return view(store.add_stage(job, host, make, config.injob_open), None)


def _owned(store: Store, caller: Caller, job: str) -> Stages:
    stages = store.job_stages(job)
    buf = _job_buffer(store, caller, job)
    mine = buf is not None or (
        stages and (caller.rights == 0 or all(s.owner_uid == caller.uid for s, _ in stages))
    )
    if not mine:
        raise NotFound(f"no job {job} of yours with stages")
    return stages


def _one(
    store: Store, caller: Caller, job: str, id: int
) -> tuple[InJobStage, InJobStageStatus | None]:
    for stage, status in _owned(store, caller, job):
        if stage.id == id:
            return stage, status
    raise NotFound(f"job {job} has no stage {id}")


def _list(store: Store, config: DacConfig, caller: Caller, job: str) -> dict[str, Any]:
    return {"stages": [view(s, st) for s, st in _owned(store, caller, job)]}


def _status(store: Store, config: DacConfig, caller: Caller, job: str, id: int) -> dict[str, Any]:
    return view(*_one(store, caller, job, id))


def _wait(
    store: Store,
    config: DacConfig,
    caller: Caller,
    job: str,
    ids: list[int] | None,
    timeout: int | None,
) -> dict[str, Any]:
    """Until every stage of `ids` (every one of the job's when none) is final, or `timeout`
    seconds (at most WAIT_MAX) pass: the views, and whether all are final. `ids` holds ints
    only (check_args)."""
    wanted = None if ids is None else set(ids)
    limit = time.monotonic() + min(WAIT_MAX, max(0, timeout if timeout is not None else WAIT_MAX))
    while True:
        stages = _owned(store, caller, job)
        chosen = [(s, st) for s, st in stages if wanted is None or s.id in wanted]
        missing = (wanted or set()) - {s.id for s, _ in chosen}
        if missing:
            raise NotFound(f"job {job} has no stage {min(missing)}")
        done = all(st is not None and st.state.final for _, st in chosen)
        if done or time.monotonic() >= limit:
            return {"stages": [view(s, st) for s, st in chosen], "done": done}
        time.sleep(0.2)


def _cancel(store: Store, config: DacConfig, caller: Caller, job: str, id: int) -> dict[str, Any]:
    stage, status = _one(store, caller, job, id)
    if status is None or not status.state.final:
        store.cancel_stage(stage)
    return view(*_one(store, caller, job, id))


def view(stage: InJobStage, status: InJobStageStatus | None) -> dict[str, Any]:
    """One stage as users see it (`dacctl stage status --json`, libdacstage)."""
    p = status.progress if status else None
    return {
        "id": stage.id,
        "job": stage.job,
        "direction": stage.direction.value,
        "type": stage.type.value,
        "source": stage.source,
        "destination": stage.destination,
        "when": stage.when.value,
        "revocable": stage.revocable,
        "state": status.state.value if status else "queued",
        "cancel": stage.cancel,
        "bytes_done": p.bytes_done if p else 0,
        "bytes_total": p.bytes_total if p else 0,
        "files_done": p.files_done if p else 0,
        "files_total": p.files_total if p else 0,
        "rate": p.rate if p else 0,
        "eta": p.eta if p else None,
        "error": status.error.message if status and status.error else None,
        "created_at": stage.created_at,
        "started_at": status.started_at if status else 0.0,
        "ended_at": status.ended_at if status else 0.0,
    }


HANDLERS: dict[str, Callable[..., dict[str, Any]]] = {
    "stage-start": _start,
    "stage-list": _list,
    "stage-status": _status,
    "stage-wait": _wait,
    "stage-cancel": _cancel,
}
