"""What a dacd announces about its server: its pools, its host record and its bricks."""

from __future__ import annotations

import os
import stat

import dacd
from daccore.errors import AdminError, ConfigError
from daccore.records.models import Backend, Brick, Host, Pool
from daccore.settings.config import DacConfig, HostSettings

__all__ = ["host_settings", "check_devices", "exposure", "host_record", "pool_records"]


def host_settings(config: DacConfig, name: str, source: str) -> HostSettings:
    try:
        return config.hosts[name]
    except KeyError:
        known = ", ".join(sorted(config.hosts)) or "none"
        raise ConfigError(
            source,
            f"hosts.{name}: this host is not in the config (hosts: {known}); pass --host or add it",
        ) from None


def check_devices(name: str, settings: HostSettings, config: DacConfig) -> None:
    """Every brick of a local pool is an existing block device, or one line naming the first
    that isn't. (Lustre bricks are checked by mkfs.lustre and parted when a buffer uses them;
    DAOS bricks belong to the engines, which name them by PCI address.)"""
    for i, b in enumerate(settings.bricks):
        if config.pools[b.pool].backend is not Backend.LOCAL:
            continue
        where = f"hosts.{name}.bricks[{i}].device"
        try:
            mode = os.stat(b.device).st_mode
        except FileNotFoundError:
            raise AdminError(f"{where}: '{b.device}' does not exist") from None
        except OSError as e:
            raise AdminError(f"{where}: cannot stat '{b.device}': {e.strerror}") from None
        if not stat.S_ISBLK(mode):
            raise AdminError(f"{where}: '{b.device}' is not a block device")


def exposure(settings: HostSettings) -> list[str]:
    """What on this server lets users read what is not theirs, one line each for the admin
    (`dacctl hosts` shows them): a brick device others may read or write (every buffer placed
    on it, whatever its directories' modes), an fs_root others may list (every buffer's name)
    or change. A missing fs_root is made, root's and 0711: passable, since the copier reaches a
    buffer's striped/ as the job's user, never listable."""
    lines = []
    for b in settings.bricks:
        try:
            st = os.stat(b.device)
        except OSError:
            continue  # DAOS names bricks by PCI address; a missing device is check_devices'
        if st.st_mode & 0o006:
            lines.append(
                f"brick {b.brick_name}: device {b.device} is open to every user (mode "
                f"{st.st_mode & 0o777:04o}): make it 0600 or 0660 to a group no user "
                "is in"
            )
    root = settings.fs_root
    if not os.path.lexists(root):
        os.makedirs(os.path.dirname(root) or "/", exist_ok=True)
        try:
            os.mkdir(root, 0o711)
            os.chmod(root, 0o711)  # whatever the umask
        except FileExistsError:
            pass
    try:
        st = os.lstat(root)
    except OSError as e:
        return [*lines, f"fs_root {root}: {e.strerror}"]
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != 0:
        lines.append(
            f"fs_root {root} is not a directory of root's (owner uid {st.st_uid}): "
            "buffers are mounted there as root"
        )
    elif st.st_mode & 0o006:
        lines.append(
            f"fs_root {root} can be listed or changed by every user (mode "
            f"{st.st_mode & 0o777:04o}): chmod 0711 it"
        )
    return lines


def host_record(name: str, settings: HostSettings, warnings: list[str] | None = None) -> Host:
    return Host(
        name=name,
        versions={"dacd": dacd.__version__},
        warnings=warnings or [],
        bricks=[
            Brick(
                name=b.brick_name,
                device=b.device,
                capacity=b.capacity,
                pool=b.pool,
                socket=b.socket,
                pcie_switch=b.pcie_switch,
            )
            for b in settings.bricks
        ],
    )


def pool_records(config: DacConfig) -> list[Pool]:
    return [
        Pool(
            name=n,
            granularity=p.granularity,
            backend=p.backend,
            placement=p.effective_placement,
            swap=p.swap,
        )
        for n, p in sorted(config.pools.items())
    ]
