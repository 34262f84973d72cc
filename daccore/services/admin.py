"""What the admin commands change: draining hosts, and persistent buffers made and destroyed
outside a job. The buffer rules are `daccore.services.jobs`'s, the ones Slurm's create_persistent
and teardown go through; this module adds only who may ask.

Admins are root and the members of the config's `admin_group` (`daccore.rules.rights`).
"""

from __future__ import annotations

from daccore.errors import NotFound, UserError
from daccore.records.models import State
from daccore.rules.directives import PERSISTENT_NAME
from daccore.rules.rights import rights
from daccore.rules.trust import check_owner
from daccore.services import jobs
from daccore.settings.bb_policy import check_persistent

TYPE_CHECKING = False  # typing's own; mypy: True
if TYPE_CHECKING:
    from daccore.records.models import Buffer
    from daccore.settings.config import DacConfig
    from daccore.store import Store

__all__ = [
    "rights",
    "require_root",
    "set_drained",
    "create_persistent",
    "destroy_persistent",
    "forget",
]


def require_root(uid: int, what: str) -> None:
    """`uid` as `rights` gives it."""
    if uid != 0:
        raise UserError(f"only root or the admin group may {what}")


def set_drained(store: Store, host: str, drained: bool, uid: int) -> list[str]:
    """Drain (no new buffers are placed there) or undrain `host`; returns the buffers still
    holding bricks on it, which a drain leaves alone."""
    require_root(uid, "drain hosts" if drained else "undrain hosts")
    try:
        store.set_drained(host, drained)
    except NotFound:
        known = ", ".join(sorted(store.hosts())) or "none registered"
        raise NotFound(f"unknown host '{host}' (hosts: {known})") from None
    from daccore.services.admin_views import sort_names

    return sort_names({b for (h, _), b in store.claims().items() if h == host})


def create_persistent(
    store: Store,
    config: DacConfig,
    name: str,
    capacity: int,
    pool: str | None,
    access: str,
    type_: str,
    caller: tuple[int, int],
    owner: tuple[int | None, int | None] = (None, None),
    admin: bool = False,
) -> Buffer:
    """Create persistent buffer `name`, wait (config.step_timeout) until every host has built
    it and return its spec. `caller` is the (uid, gid) asking; `owner` (uid, gid), both or
    neither, is for admins only; by default the caller owns the buffer."""
    uid, gid = owner
    if (uid is None) != (gid is None):
        raise UserError("give --user and --group together (the buffer's owner and group)")
    if uid is not None and not admin and (uid, gid) != caller:
        raise UserError(
            "only root or the admin group may create a buffer for another user (--user, --group)"
        )
    check_persistent(config, caller[0], 0 if admin else caller[0], "create")
    if not PERSISTENT_NAME.match(name):
        raise UserError(
            f"create-persistent: name '{name}' must start with a letter and "
            "contain only letters, digits, _ . -"
        )
    if store.buffer(name) is not None:  # before placement: a full pool would say "no room"
        raise UserError(f"buffer '{name}' already exists")
    uid, gid = caller if uid is None or gid is None else (uid, gid)  # both or neither: above
    check_owner(uid, gid, config.min_owner_uid)
    jobs.create_persistent(
        store,
        name,
        uid,
        gid,
        capacity,
        pool,
        access,
        type_,
        config.default_pool,
        config.own_mgs_pools(),
        config.persistent_caps.model_dump(),
        config.held_share,
    )
    jobs.wait_for(store, name, State.CREATED, config.step_timeout, grace=config.restart_grace)
    current = store.buffer(name)
    if current is None:
        raise NotFound(f"persistent buffer '{name}' was destroyed as soon as it was built")
    built: Buffer = current.record
    return built


def destroy_persistent(store: Store, config: DacConfig, name: str, uid: int) -> None:
    """Delete persistent buffer `name` and wait (config.step_timeout) until it is gone.
    Another user's buffer is NotFound, as in `dacctl status`; a job's buffer is refused (it
    goes with its job)."""
    current = store.buffer(name)
    if current is None or uid not in (0, current.record.owner_uid):
        raise NotFound(f"no persistent buffer '{name}' of yours")
    check_persistent(config, uid, uid, "destroy")
    if not current.record.persistent:
        job = current.record.job_id
        raise UserError(
            f"buffer '{name}' belongs to job {job} and goes when the job ends (scancel {job})"
        )
    jobs.destroy(store, name, uid)
    jobs.wait_for(store, name, State.DELETED, config.step_timeout, grace=config.restart_grace)


def forget(store: Store, name: str, uid: int) -> list[str]:
    """Drop a buffer's spec, statuses and claims without dacd: for a buffer stranded on a
    storage host that is gone for good (teardown waits for every host's dacd). Refused while
    any of its hosts is alive: then its dacd can tear it down, and must, or its filesystem and
    mounts would leak. Returns the dead hosts, whose bricks the admin must wipe by hand."""
    require_root(uid, "forget buffers")
    current = store.buffer(name)
    if current is None:
        raise NotFound(f"no buffer '{name}'")
    hosts: list[str] = current.record.allocation.hosts
    alive = sorted(set(hosts) & store.alive())
    if alive:
        raise UserError(
            f"buffer '{name}' has live hosts ({', '.join(alive)}): tear it down "
            "instead (scancel the job, or dacctl destroy-persistent); forget is for "
            "buffers whose hosts are gone"
        )
    store.delete_buffer(name, current.mod_revision)
    return hosts
