"""What every backend is built from: the `Backend` base class, the registry its subclasses
add themselves to, and the helpers they share. The package imports the backends; they import
this, never the package."""

from __future__ import annotations

import os
from abc import ABC, abstractmethod

from daccore.errors import AdminError
from daccore.records.layout import mount_path

TYPE_CHECKING = False  # typing's own, without importing typing on the hooks' path; mypy: True
if TYPE_CHECKING:
    from typing import Any, Callable

    from daccore.records.models import BrickRef, Buffer
    from daccore.settings.config import BrickSettings, DacConfig

    #: playbook variables, an Ansible inventory or a part of one: what ansible_runner takes
    Vars = dict[str, Any]

__all__ = [
    "Backend",
    "Templated",
    "templated",
    "register",
    "REGISTRY",
    "unservable",
    "node_mounts",
    "prune_list",
]

REGISTRY: dict[str, type[Backend]] = {}


class Backend(ABC):
    """Turn a buffer and a host into playbook variables for create / mount / unmount / delete."""

    name = ""
    one_run_for_all_hosts = False

    def __init__(self, config: DacConfig, host: str):
        self.config, self.host = config, host

    def inventory(
        self, buffer: Buffer, step: str, attached: dict[str, list[str]] | None = None
    ) -> Vars:
        """The Ansible inventory of a step: by default this host, over the local connection."""
        return {"all": {"hosts": {self.host: self.host_vars(self.host)}}}

    def client_changes(
        self, buffer: Buffer, step: str, attached: dict[str, list[str]] | None, access: list[str]
    ) -> tuple[dict[str, dict[str, str]], dict[str, Vars]]:
        """For backends that mount on compute nodes themselves: (the parts the spec wants
        mounted, node -> {mount point: part}; per node touched, its inventory variables:
        `mounts` (new mount point -> part), `unmounts` and `prune` (daccore.backends.prune_list)).
        A delete unmounts whatever may be mounted, even by a step cut short."""
        root = self.config.node_mount_root
        want = node_mounts(buffer, buffer.attachments, root, access)
        have = node_mounts(buffer, attached or {}, root, access)
        if step == "delete":
            have = {n: {**have.get(n, {}), **want.get(n, {})} for n in {*have, *want}}
            want = {}
        clients: dict[str, Vars] = {}
        for node in sorted({*want, *have}):
            mine, had = want.get(node, {}), have.get(node, {})
            gone = sorted(t for t in had if t not in mine)
            clients[node] = {
                **templated(self.config.node_ansible_vars),
                "mounts": {t: p for t, p in sorted(mine.items()) if t not in had},
                "unmounts": gone,
                "prune": prune_list(gone, root(node)),
            }
        return want, clients

    def host_vars(self, host: str) -> Vars:
        """How Ansible reaches a storage server: this one locally, others as the config says."""
        local = {"ansible_connection": "local"} if host == self.host else {}
        return {**local, **templated(self.config.hosts[host].ansible_vars)}

    def brick(self, buffer: Buffer, ref: BrickRef) -> BrickSettings:
        """A brick of the allocation as the config has it: its device comes from there, never
        from the record (daccore.rules.trust)."""
        host = self.config.hosts.get(ref.host)
        brick = next((b for b in host.bricks if b.brick_name == ref.brick), None) if host else None
        if brick is None:
            raise AdminError(
                f"buffer {buffer.name}: brick {ref.host}:{ref.brick} is not in "
                "this server's config; give every dacd the same config"
            )
        return brick

    def device(self, buffer: Buffer, ref: BrickRef) -> str:
        return self.brick(buffer, ref).device

    @abstractmethod
    def variables(
        self, buffer: Buffer, step: str, attached: dict[str, list[str]] | None = None
    ) -> Vars:
        """The extravars of `playbooks/<name>/<step>.yml` for this buffer on this
        host; `attached` is what this host has mounted on compute nodes so far (job -> nodes)."""


class Templated(str):
    """A string an admin wrote in the config (`ansible_vars`, `node_ansible_vars`): Ansible
    may template it. Every other string reaches a playbook marked unsafe (dacd.runner), so
    nothing read from a record is ever rendered as Jinja."""


def templated(value: Any) -> Any:
    """`value` (config data, as YAML gave it) with every string in it marked Templated."""
    if isinstance(value, str):
        return Templated(value)
    if isinstance(value, dict):
        return {k: templated(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [templated(v) for v in value]
    return value


def register(name: str) -> Callable[[type[Backend]], type[Backend]]:
    def add(cls: type[Backend]) -> type[Backend]:
        cls.name = name
        REGISTRY[name] = cls
        return cls

    return add


def node_mounts(
    buffer: Buffer,
    attachments: dict[str, list[str]],
    node_root: Callable[[str], str],
    access: list[str],
) -> dict[str, dict[str, str]]:
    """What each compute node mounts for these attachments: node -> {mount point: the part of
    the buffer seen there}, the part being `striped` or `private/<node>` (daccore.records.layout
    says where, for every backend)."""
    out: dict[str, dict[str, str]] = {}
    for job, nodes in attachments.items():
        for node in nodes:
            root = node_root(node)
            for kind in access:
                part = os.path.join(kind, node) if kind == "private" else kind
                out.setdefault(node, {})[
                    mount_path(root, job, buffer.name, buffer.persistent, kind)
                ] = part
    return out


def prune_list(targets: list[str], root: str) -> list[str]:
    """The mount points `targets` and their parents below the node's `root`, deepest first:
    what `rmdir` removes, one by one, once they are unmounted and empty."""
    root = os.path.normpath(root)
    dirs = set()
    for target in targets:
        path = os.path.normpath(target)
        while path.startswith(root + os.sep):
            dirs.add(path)
            path = os.path.dirname(path)
    return sorted(dirs, key=lambda d: (-d.count(os.sep), d))


def unservable(backend: str, bricks: int, swap: int, access: str = "striped") -> str | None:
    """Why a pool's backend cannot serve a request, or None. Plain data in, so job_process
    (inside slurmctld) can ask without loading any backend."""
    if backend == "daos" and "private" in access.split(","):
        return (
            "the daos backend has no private mode (a POSIX container is one namespace "
            "shared by the job's nodes): use access_mode=striped"
        )
    if swap and backend != "local":
        return f"the {backend} backend offers no swap"
    if backend == "local" and swap and bricks > 1:
        return (
            "the local backend holds swap files only in a one-brick buffer (xfs): btrfs "
            "cannot put a swap file across devices"
        )
    return None
