"""Backends: how a buffer's allocation becomes a filesystem. Each one names its playbook
directory and turns (buffer, host) into the variables its playbooks take; they register by
name, and an unknown name is a ConfigError that lists the choices.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Callable

from daccore.errors import ConfigError

if TYPE_CHECKING:
    from daccore.config import DacConfig
    from daccore.models import Buffer

__all__ = ["Backend", "register", "get", "unservable"]

_REGISTRY: dict[str, type[Backend]] = {}


class Backend(ABC):
    """Turn a buffer and a host into playbook variables for create / mount / unmount / delete."""

    name = ""

    def __init__(self, config: DacConfig, host: str):
        self.config, self.host = config, host

    @abstractmethod
    def variables(self, buffer: Buffer, step: str,
                  attached: dict[str, list[str]] | None = None) -> dict:
        """The extravars of `playbooks/<name>/<step>.yml` for this buffer on this host;
        `attached` is what this host has mounted on compute nodes so far (job -> nodes)."""


def register(name: str) -> Callable[[type[Backend]], type[Backend]]:
    def add(cls: type[Backend]) -> type[Backend]:
        cls.name = name
        _REGISTRY[name] = cls
        return cls
    return add


def get(name: str, config: DacConfig, host: str, source: str = "config") -> Backend:
    from daccore.backends import local  # noqa: F401  (registers itself)
    try:
        return _REGISTRY[name](config, host)
    except KeyError:
        raise ConfigError(source, f"no such backend: '{name}' (choose "
                                  f"{', '.join(sorted(_REGISTRY))})") from None


def unservable(backend: str, bricks: int, swap: int) -> str | None:
    """Why a pool's backend cannot serve a request, or None. Plain data in, so job_process
    (inside slurmctld) can ask without loading any backend."""
    if backend == "local" and swap and bricks > 1:
        return ("the local backend holds swap files only in a one-brick buffer (xfs): btrfs "
                "cannot put a swap file across devices")
    return None
