"""Backends: how a buffer's allocation becomes a filesystem. Each one names its playbook
directory and turns (buffer, host) into the inventory and variables its playbooks take; they
register by name, and an unknown name is a ConfigError that lists the choices.

Two ways to run a step. `local` builds a filesystem per server from that server's bricks, so
every host's dacd runs its own steps on itself. `lustre` and `daos` build one filesystem across
servers whose steps must run in order across them (MGS before targets, pool before container),
so the buffer's primary host runs each step once for all its hosts and compute nodes
(`one_run_for_all_hosts`), and records the state reached for each host.
"""

from __future__ import annotations

from daccore.backends.base import (
    REGISTRY,
    Backend,
    Templated,
    node_mounts,
    prune_list,
    templated,
    unservable,
)
from daccore.errors import ConfigError

TYPE_CHECKING = False  # typing's own, without importing typing on the hooks' path; mypy: True
if TYPE_CHECKING:
    from daccore.settings.config import DacConfig

__all__ = [
    "Backend",
    "Templated",
    "templated",
    "get",
    "runs_once_for_all_hosts",
    "unservable",
    "node_mounts",
    "prune_list",
]


def _registry() -> dict[str, type[Backend]]:
    from daccore.backends import daos, local, lustre  # noqa: F401  (each registers itself)

    return REGISTRY


def runs_once_for_all_hosts(name: str) -> bool:
    cls = _registry().get(name)
    return cls is not None and cls.one_run_for_all_hosts


def get(name: str, config: DacConfig, host: str, source: str = "config") -> Backend:
    try:
        return _registry()[name](config, host)
    except KeyError:
        raise ConfigError(
            source, f"no such backend: '{name}' (choose {', '.join(sorted(REGISTRY))})"
        ) from None
