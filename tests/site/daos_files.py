"""What a file read through a dfuse mount returns: the DAOS container's data, or dfuse's cache.

The stand-ins do not run FUSE, so a container's files and each mount's cache live in the
site's state, and tests read and write "through" a host's dfuse mount with `read` and `write`.
The cache follows dfuse 2.6 (daos v2.6.5 src/client/dfuse): caching is on unless the mount was
started with --disable-caching (dfuse_main.c:493-495, which also turns off the write-back
cache), and cached data is served for dfuse-data-cache seconds, 600 by default
(dfuse_core.c:773), without asking the engines whether another node changed the file.

State: state["daos"]["files"][container uuid][path in the container] = text, and each mount's
state["daos"]["dfuse"][host][mount point]["cache"][path] = [text, time cached].
"""

from __future__ import annotations

import os
import time

from daos_site import daos_state
from sitelib import Refused, Site

__all__ = ["read", "write", "DATA_CACHE_SECONDS"]

DATA_CACHE_SECONDS = 600


def _mount_of(daos: dict, host: str, path: str) -> tuple[dict, str]:
    """The host's dfuse mount holding `path` (the innermost), and the path inside it."""
    path = os.path.abspath(path)
    mounts = daos["dfuse"].get(host, {})
    best = max(
        (m for m in mounts if path == m or path.startswith(m.rstrip("/") + "/")),
        key=len,
        default=None,
    )
    if best is None:
        raise Refused(f"{path}: not under a dfuse mount on {host}", 2)
    return mounts[best], os.path.relpath(path, best)


def write(site: Site, path: str, text: str, now: float | None = None) -> None:
    """Write (and close) a file through this host's dfuse mount: the container has it."""
    now = time.time() if now is None else now
    with site.state() as state:
        daos = daos_state(state)
        entry, inside = _mount_of(daos, site.host, path)
        daos.setdefault("files", {}).setdefault(entry["container_uuid"], {})[inside] = text
        if entry.get("caching", True):
            entry.setdefault("cache", {})[inside] = [text, now]


def read(site: Site, path: str, now: float | None = None) -> str:
    """Read a file through this host's dfuse mount: from the mount's cache while it is fresh."""
    now = time.time() if now is None else now
    with site.state() as state:
        daos = daos_state(state)
        entry, inside = _mount_of(daos, site.host, path)
        cached = entry.get("cache", {}).get(inside)
        if entry.get("caching", True) and cached and now - cached[1] < DATA_CACHE_SECONDS:
            return cached[0]
        text = daos.get("files", {}).get(entry["container_uuid"], {}).get(inside)
        if text is None:
            raise Refused(f"{path}: No such file or directory", 2)
        if entry.get("caching", True):
            entry.setdefault("cache", {})[inside] = [text, now]
        return text
