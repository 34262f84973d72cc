"""The `daos` backend: one DAOS pool per buffer on the engines that own its bricks, holding one
POSIX container, mounted with dfuse.

A brick's engine is the one on its socket (one engine per socket; `hosts.<h>.daos_ranks`
maps socket to rank), so the pool spans exactly the ranks holding the allocation, sized from
it. The pool belongs to the job's user and group; its ACL keeps only the owner (the group
entry DAOS adds by default is removed), as a 0700 directory would. The container is created,
and dfuse run and stopped, as the user (setpriv with the user's uid, gid and groups): DAOS
checks the caller's identity against the pool's ACL itself, and a user's dfuse mount is theirs.

    primary   dmg pool create / delete-acl, daos container create, dfuse at
              <fs_root>/<buffer>/striped for staging (the container's root is the striped dir)
    clients   dfuse at the daccore.layout path; fusermount3 -u when detached

A POSIX container is one namespace: there is no private mode, and job_process says so.
"""

from __future__ import annotations

import grp
import os
import pwd

from daccore.backends.base import Backend, register
from daccore.errors import AdminError

__all__ = ["DaosBackend", "pool_label", "CONTAINER"]

CONTAINER = "posix"


def pool_label(buffer) -> str:
    return f"dac-{buffer.name}"[:127]  # DAOS labels hold 127 characters


@register("daos")
class DaosBackend(Backend):
    one_run_for_all_hosts = True

    def ranks(self, buffer) -> list[int]:
        """The engine ranks of the buffer's bricks."""
        ranks = set()
        for ref in buffer.allocation.bricks:
            ranks.add(self.config.hosts[ref.host].daos_ranks[self.brick(buffer, ref).socket])
        return sorted(ranks)

    def variables(self, buffer, step: str, attached: dict[str, list[str]] | None = None) -> dict:
        user, group = _names(buffer.owner_uid, buffer.owner_gid, self.host)
        fs_path = os.path.join(self.config.hosts[buffer.allocation.primary_host].fs_root,
                               buffer.name)
        return {
            "buffer": buffer.name,
            "pool": pool_label(buffer),
            "container": CONTAINER,
            "size": str(buffer.allocation.size),
            "ranks": ",".join(str(r) for r in self.ranks(buffer)),
            "owner_user": user,
            "owner_group": group,
            "owner_uid": buffer.owner_uid,
            "owner_gid": buffer.owner_gid,
            "as_user": ["setpriv", f"--reuid={buffer.owner_uid}",
                        f"--regid={buffer.owner_gid}", "--init-groups"],
            "fs_path": fs_path,
            "staging_mount": os.path.join(fs_path, "striped"),
        }

    def inventory(self, buffer, step: str, attached: dict[str, list[str]] | None = None) -> dict:
        primary = buffer.allocation.primary_host
        _, clients = self.client_changes(buffer, step, attached, ["striped"])
        for node in clients.values():  # dfuse mounts the container: the mount points suffice
            node["mounts"] = list(node["mounts"])
        return {"all": {"children": {"primary": {"hosts": {primary: self.host_vars(primary)}},
                                     "clients": {"hosts": clients}}}}


def _names(uid: int, gid: int, host: str) -> tuple[str, str]:
    """DAOS ACLs and owners name users and groups, so both must resolve on the primary."""
    try:
        user = pwd.getpwuid(uid).pw_name
        group = grp.getgrgid(gid).gr_name
    except KeyError:
        raise AdminError(f"uid {uid} or gid {gid} has no name on {host}: DAOS pools name their "
                         "owner; give the storage servers the site's users (LDAP, sssd)") from None
    return user, group
