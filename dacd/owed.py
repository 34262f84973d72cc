"""A compute node dead at teardown never holds a buffer's bricks (docs/reliability.md, "A node
dead at teardown").

When a teardown (delete) reached every storage server and every live node, and only compute nodes
did not answer, the buffer's filesystem is gone: its targets are stopped and wiped on the servers,
so a node that comes back can reach nothing of it, and the bricks can serve the next buffer (under a
new Lustre fsname, a new DAOS pool). What such a node still owes is its client mounts of the dead
filesystem: recorded as `owed/<node>/<buffer>` (daccore.records.models.Owed), shown by `dacctl
owed`, unmounted by the primary's dacd once the node answers again, or declared gone by an admin
(`dacctl forget-node`). A storage server that does not answer never counts as done: its bricks may
still hold the filesystem.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import TYPE_CHECKING, Protocol

from daccore.backends import get as get_backend
from daccore.backends import templated
from daccore.errors import DacError, HostsUnreachable
from daccore.escape import printable
from daccore.records.models import Owed

if TYPE_CHECKING:
    from daccore.backends import Backend
    from daccore.records.models import Buffer
    from daccore.settings.config import DacConfig
    from dacd.runner import RunStep

log = logging.getLogger(__name__)

__all__ = ["leave_owed", "retry_owed", "RETRY"]

#: seconds between two tries of what the nodes this dacd recorded owe
RETRY = 30.0


class _OwedKeys(Protocol):
    def owed(self, node: str, buffer: str) -> str: ...


class OwedStore(Protocol):
    """What this module does with the Store: its `owed/` records."""

    @property
    def keys(self) -> _OwedKeys: ...

    def put_owed(self, owed: Owed) -> None: ...

    def owed(self) -> list[Owed]: ...

    def drop_owed(self, node: str, buffer: str) -> int: ...


def leave_owed(
    store: OwedStore,
    config: DacConfig,
    host: str,
    buf: Buffer,
    backend: Backend,
    attached: dict[str, list[str]],
    error: Exception,
) -> bool:
    """Record what the nodes that did not answer `buf`'s delete owe, when they are all compute
    nodes and every other host ran the whole delete; True then (the delete counts as done)."""
    if not isinstance(error, HostsUnreachable) or not error.rest_done:
        return False
    servers = set(config.hosts)
    lustre = config.pools[buf.request.pool].lustre
    if lustre is not None and lustre.mgs != "per_buffer":
        servers.add(lustre.mgs.host)
    if servers & set(error.hosts):
        return False  # a server's bricks may still hold the filesystem
    clients = (
        backend.inventory(buf, "delete", attached)
        .get("all", {})
        .get("children", {})
        .get("clients", {})
        .get("hosts", {})
    )
    extravars = backend.variables(buf, "unmount", attached)
    for node in error.hosts:
        mine = clients.get(node, {})
        store.put_owed(
            Owed(
                node=node,
                buffer=buf.name,
                by_host=host,
                pool=buf.request.pool,
                unmounts=list(mine.get("unmounts", [])),
                prune=list(mine.get("prune", [])),
                extravars=extravars,
                since=time.time(),
            )
        )
        log.warning(
            "buffer %s (job %s): %s did not answer at teardown; the filesystem is gone "
            "from every server, so its bricks are released; %s owes %d unmounts, done "
            "when it answers (dacctl owed; dacctl forget-node %s if gone for good)",
            buf.name,
            buf.job_id,
            node,
            node,
            len(mine.get("unmounts", [])),
            node,
        )
    return True


def retry_owed(
    stopping: threading.Event,
    store: OwedStore,
    config: DacConfig,
    host: str,
    run_step: RunStep,
    every: float = RETRY,
) -> None:
    """Until `stopping`: every `every` seconds, try what the nodes this host recorded owe."""
    while not stopping.wait(every):
        try:
            debts = [o for o in store.owed() if o.by_host == host]
        except DacError as e:
            log.warning("could not read what nodes owe (%s); trying again later", e)
            continue
        for owed in debts:
            if stopping.is_set():
                return
            _try(store, config, host, run_step, owed)


def _try(store: OwedStore, config: DacConfig, host: str, run_step: RunStep, owed: Owed) -> None:
    root = os.path.normpath(config.node_mount_root(owed.node))
    paths = [*owed.unmounts, *owed.prune]
    if owed.pool not in config.pools or any(
        not os.path.normpath(p).startswith(root + os.sep) for p in paths
    ):
        # dacd trusts nothing it reads: only paths below the node's mount root are touched
        log.error(
            "skipping %s: names a path outside %s on %s, or an unknown pool; an admin "
            "must check it (dacctl forget-node %s drops it)",
            printable(store.keys.owed(owed.node, owed.buffer)),
            root,
            owed.node,
            owed.node,
        )
        return
    backend = get_backend(config.pools[owed.pool].backend.value, config, host)
    inventory = {
        "all": {
            "children": {
                "clients": {
                    "hosts": {
                        owed.node: {
                            **templated(config.node_ansible_vars),
                            "mounts": [],
                            "unmounts": owed.unmounts,
                            "prune": owed.prune,
                        }
                    }
                }
            }
        }
    }
    try:
        run_step(
            backend.name,
            "unmount",
            host,
            owed.extravars,
            None,
            inventory=inventory,
            forks=1,
            ssh=config.ssh,
        )
    except HostsUnreachable:
        return  # still away: the next round tries again
    except DacError as e:
        log.warning(
            "buffer %s: %s's unmounts failed: %s", owed.buffer, owed.node, printable(str(e))
        )
        return
    store.drop_owed(owed.node, owed.buffer)
    log.info("buffer %s: %s answered again and its mounts of it are gone", owed.buffer, owed.node)
