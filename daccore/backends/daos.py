"""The `daos` backend: one DAOS pool per buffer on the engines that own its bricks, holding one
POSIX container, mounted with dfuse.

A brick's engine is the one on its socket (one engine per socket; `hosts.<h>.daos_ranks`
maps socket to rank), so the pool spans exactly the ranks holding the allocation, sized from
it: DAOS gives a pool the same SCM and NVMe on each of its ranks, so each rank gives the NVMe of
its fewest allocated bricks (never more than dac accounted to any rank), and SCM in the pool's
`scm_percent` (dmg pool create --scm-size --nvme-size, per rank). An allocation spread so
unevenly over ranks that this falls short of the capacity asked is refused in one line.

The pool belongs to the job's user and group; its ACL keeps only the owner (the group
entry DAOS adds by default is removed), as a 0700 directory would. The container is created,
and dfuse run and stopped, as the user (setpriv with the user's uid, gid and groups): DAOS
checks the caller's identity against the pool's ACL itself, and a user's dfuse mount is theirs.

    primary   dmg pool create / delete-acl, daos container create, dfuse at
              <fs_root>/<buffer>/striped for staging (the container's root is the striped dir),
              <fs_root>/<buffer>/ being root's, 0700, passable by the buffer's owner alone
    clients   dfuse at the daccore.records.layout path, below <mount root>/<job>/ (and
              persistent/) closed the same way; fusermount3 -u when detached

The directories above a dfuse mount point are root's, so no user can swap them, and carry an
access ACL `user:<owner>:--x` (lustre.passable_to): dfuse and fusermount3, run as the owner,
still reach the mount point (they resolve it, and chdir to it or its parent, as the user), and
no other user can hold the mount open (O_PATH needs no permission on the target itself) or
measure it with statvfs (issue 45).

Every dfuse runs with --disable-caching: the staging mount lives as long as the buffer while the
nodes change the files, and dfuse's default caching would let stage-out read pages up to ten
minutes old (dfuse_core.c: data cache timeout 600 s).

A POSIX container is one namespace: there is no private mode, and job_process says so.
"""

from __future__ import annotations

import grp
import os
import pwd
from typing import TYPE_CHECKING

from daccore.backends.base import Backend, register
from daccore.backends.lustre import closed_dirs, passable_to
from daccore.errors import AdminError
from daccore.units import format_size

if TYPE_CHECKING:
    from daccore.backends.base import Vars
    from daccore.records.models import Buffer

__all__ = ["DaosBackend", "pool_label", "CONTAINER"]

CONTAINER = "posix"


def pool_label(buffer: Buffer) -> str:
    return f"dac-{buffer.name}"[:127]  # DAOS labels hold 127 characters


@register("daos")
class DaosBackend(Backend):
    one_run_for_all_hosts = True

    def ranks(self, buffer: Buffer) -> list[int]:
        """The engine ranks of the buffer's bricks."""
        return sorted(self._per_rank(buffer))

    def _per_rank(self, buffer: Buffer) -> dict[int, int]:
        """Bytes dac allocated to the buffer on each engine rank."""
        out: dict[int, int] = {}
        for ref in buffer.allocation.bricks:
            rank = self.config.hosts[ref.host].daos_ranks[self.brick(buffer, ref).socket]
            out[rank] = out.get(rank, 0) + ref.capacity
        return out

    def tier_bytes(self, buffer: Buffer) -> tuple[int, int]:
        """(SCM, NVMe) bytes per rank: the same on every rank, as DAOS allocates them."""
        per_rank = self._per_rank(buffer)
        nvme = min(per_rank.values()) >> 20 << 20
        if nvme * len(per_rank) < buffer.request.capacity:
            counts = ", ".join(f"rank {r}: {format_size(b)}" for r, b in sorted(per_rank.items()))
            raise AdminError(
                f"buffer {buffer.name}: a DAOS pool has the same NVMe on each of its ranks, and "
                f"its bricks lie unevenly on {len(per_rank)} ranks ({counts}): the pool would "
                f"hold {format_size(nvme * len(per_rank))} of the "
                f"{format_size(buffer.request.capacity)} asked; ask for a multiple of "
                "the granularity that fills whole ranks, or give the pool more engines"
            )
        settings = self.config.pools[buffer.request.pool].daos
        assert settings is not None  # a daos pool has its settings (validated at load)
        return settings.scm_for(nvme), nvme

    def variables(
        self, buffer: Buffer, step: str, attached: dict[str, list[str]] | None = None
    ) -> Vars:
        user, group = _names(buffer.owner_uid, buffer.owner_gid, self.host)
        scm, nvme = self.tier_bytes(buffer) if step == "create" else (0, 0)
        fs_path = os.path.join(
            self.config.hosts[buffer.allocation.primary_host].fs_root, buffer.name
        )
        return {
            "buffer": buffer.name,
            "pool": pool_label(buffer),
            "container": CONTAINER,
            "scm_size": str(scm),
            "nvme_size": str(nvme),
            "ranks": ",".join(str(r) for r in self.ranks(buffer)),
            "owner_user": user,
            "owner_group": group,
            "owner_uid": buffer.owner_uid,
            "owner_gid": buffer.owner_gid,
            "as_user": [
                "setpriv",
                f"--reuid={buffer.owner_uid}",
                f"--regid={buffer.owner_gid}",
                "--init-groups",
            ],
            "fs_path": fs_path,
            "staging_mount": os.path.join(fs_path, "striped"),
            "owner_acl": passable_to(buffer.owner_uid),
        }

    def inventory(
        self, buffer: Buffer, step: str, attached: dict[str, list[str]] | None = None
    ) -> Vars:
        primary = buffer.allocation.primary_host
        _, clients = self.client_changes(buffer, step, attached, ["striped"])
        for name, node in clients.items():  # dfuse mounts the container: mount points suffice
            node["mounts"] = list(node["mounts"])
            node["node_root"] = self.config.node_mount_root(name)
            node["closed"] = closed_dirs(node["mounts"], node["node_root"])
        return {
            "all": {
                "children": {
                    "primary": {"hosts": {primary: self.host_vars(primary)}},
                    "clients": {"hosts": clients},
                }
            }
        }


def _names(uid: int, gid: int, host: str) -> tuple[str, str]:
    """DAOS ACLs and owners name users and groups, so both must resolve on the primary."""
    try:
        user = pwd.getpwuid(uid).pw_name
        group = grp.getgrgid(gid).gr_name
    except KeyError:
        raise AdminError(
            f"uid {uid} or gid {gid} has no name on {host}: DAOS pools name their "
            "owner; give the storage servers the site's users (LDAP, sssd)"
        ) from None
    return user, group
