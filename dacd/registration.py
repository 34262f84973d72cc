"""What a dacd announces about its server: its pools, its host record and its bricks."""

from __future__ import annotations

import os
import stat

import dacd
from daccore.config import DacConfig, HostSettings
from daccore.errors import AdminError, ConfigError
from daccore.models import Backend, Brick, Host, Pool

__all__ = ["host_settings", "check_devices", "host_record", "pool_records"]


def host_settings(config: DacConfig, name: str, source: str) -> HostSettings:
    try:
        return config.hosts[name]
    except KeyError:
        known = ", ".join(sorted(config.hosts)) or "none"
        raise ConfigError(source, f"hosts.{name}: this host is not in the config "
                                  f"(hosts: {known}); pass --host or add it") from None


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


def host_record(name: str, settings: HostSettings) -> Host:
    return Host(name=name, versions={"dacd": dacd.__version__}, bricks=[
        Brick(name=b.brick_name, device=b.device, capacity=b.capacity, pool=b.pool,
              socket=b.socket, pcie_switch=b.pcie_switch) for b in settings.bricks])


def pool_records(config: DacConfig) -> list[Pool]:
    return [Pool(name=n, granularity=p.granularity, backend=p.backend,
                 placement=p.effective_placement, swap=p.swap)
            for n, p in sorted(config.pools.items())]
