"""The config as the hooks inside slurmctld read it: no yaml, no pydantic.

`daccore.settings.config` validates the YAML file with pydantic; importing the two costs ~200 ms,
about three times the whole budget of job_process, pools and paths (docs/performance.md). So the
validated config is cached as JSON, keyed by the file's identity (path, inode, size, mtime): the
first call after an edit validates and writes the cache, the others read it. The environment
(DAC_ETCD_ENDPOINTS, ETCDCTL_*) is applied on every read, by the same functions
`daccore.settings.config` uses (`daccore.settings.env`), so both paths always agree.

The cache lives in $DAC_CACHE_DIR, else /var/cache/dac, else a 0700 directory of the calling
user under the temp dir; a cache file not owned by the caller, or writable by others, is ignored.
"""

from __future__ import annotations

import json
import os

from daccore.settings.env import apply_env, config_path, etcd_urls

TYPE_CHECKING = False  # typing's own, without importing typing on the hooks' path; mypy: True
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

    #: the config as JSON data (DacConfig's fields but `hosts`, plus `own_mgs_pools`), or any
    #: JSON document written with write_private_json
    Json = dict[str, Any]

__all__ = ["load_settings", "ConfigView", "cache_dir", "write_private_json"]

_VERSION = 2


def load_settings(path: str | None = None, env: Mapping[str, str] | None = None) -> Json:
    """The validated config as plain JSON data, environment applied. Raises ConfigError."""
    env = os.environ if env is None else env
    source = config_path(path, env)
    identity = _identity(source)
    cache = _cache_file(source, env)
    data = _read_cache(cache, identity) if cache else None
    if data is None:
        from daccore.settings.config import load_config  # validates; raises ConfigError

        config = load_config(source, env={})
        # no `hosts`: no function that reads the cache needs them, and on a site of 1,000
        # servers x 24 bricks they are 2.6 MB of JSON, 35-70 ms to read on every call
        # (bench/scale.py)
        data = config.model_dump(mode="json", exclude={"hosts"})
        data["own_mgs_pools"] = sorted(config.own_mgs_pools())  # derived once, by the config
        if cache:
            _write_cache(cache, identity, data)
    data = apply_env(data, env)
    etcd = data["etcd"]
    if not etcd.get("endpoints"):
        from daccore.errors import ConfigError

        raise ConfigError(source, "etcd.endpoints: the environment gives no endpoint")
    etcd["urls"] = etcd_urls(
        etcd["endpoints"], bool(etcd.get("cacert") or etcd.get("cert") or etcd.get("key"))
    )
    return data


class ConfigView:
    """The cached config as the Slurm functions read it: DacConfig's attributes by DacConfig's
    names, so code written against a DacConfig (daccore.services.jobs, admin) takes either. The
    one lean view of the config; tests/unit/daccore/test_config_cache.py ties each attribute to
    the model's for the sample config, so the two cannot drift."""

    __slots__ = (
        "default_pool",
        "lua_directive",
        "step_timeout",
        "stage_timeout",
        "restart_grace",
        "_own_mgs",
    )

    def __init__(self, data: Json):
        self.default_pool: str = data["default_pool"]
        self.lua_directive: str = data["lua_directive"]
        self.step_timeout: float = data["step_timeout"]
        self.stage_timeout: float = data["stage_timeout"]
        self.restart_grace: float = data["restart_grace"]
        self._own_mgs = frozenset(data["own_mgs_pools"])  # derived once, by DacConfig

    def own_mgs_pools(self) -> frozenset[str]:
        return self._own_mgs


def _identity(source: str) -> list[object]:
    # The schema's identity too: after an upgrade that changes daccore/settings/config.py, a copy
    # validated by the old code must not be served.
    schema = os.stat(os.path.join(os.path.dirname(__file__), "config.py"))
    code = [_VERSION, schema.st_size, schema.st_mtime_ns]
    try:
        st = os.stat(source)
    except FileNotFoundError:
        return [os.path.abspath(source), "absent", *code]
    except OSError:
        return [os.path.abspath(source), "unreadable", *code]  # validation will say why
    return [os.path.abspath(source), st.st_ino, st.st_size, st.st_mtime_ns, *code]


def _cache_file(source: str, env: Mapping[str, str]) -> str | None:
    import hashlib

    d = cache_dir(env)
    name = hashlib.sha1(os.path.abspath(source).encode()).hexdigest()[:16] + ".json"
    return os.path.join(d, name) if d else None


def cache_dir(env: Mapping[str, str] | None = None) -> str | None:
    """The caller's cache directory: $DAC_CACHE_DIR, else /var/cache/dac, else a 0700 one
    under the temp dir; the first the caller owns, writable by no one else. None if none is."""
    env = os.environ if env is None else env
    uid = os.geteuid()
    for d in (env.get("DAC_CACHE_DIR"), "/var/cache/dac", "temp"):
        if d == "temp":
            # `tempfile` costs the hooks ~8 ms to import (it imports `random`): only here
            import tempfile

            d = os.path.join(tempfile.gettempdir(), f"dac-cache-{uid}")
        if not d:
            continue
        try:
            os.makedirs(d, mode=0o700, exist_ok=True)
            st = os.stat(d)
        except OSError:
            continue
        if st.st_uid == uid and not st.st_mode & 0o022 and os.access(d, os.W_OK):
            return d
    return None


def _read_cache(cache: str, identity: list[object]) -> Json | None:
    try:
        fd = os.open(cache, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if st.st_uid != os.geteuid() or st.st_mode & 0o022:
            return None
        try:
            cached = json.loads(f.read())
        except ValueError:
            return None
    return cached.get("config") if cached.get("identity") == identity else None


def _write_cache(cache: str, identity: list[object], data: Json) -> None:
    write_private_json(cache, {"identity": identity, "config": data})


def write_private_json(path: str, doc: Json) -> None:
    """Replace `path` atomically with `doc`, readable by the caller alone; best effort (a
    cache that cannot be written is only slower). Never writes through a link."""
    import threading

    tmp = f"{path}.{os.getpid()}.{threading.get_ident()}.tmp"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(doc, f)
        os.replace(tmp, path)
    except OSError:
        try:
            os.unlink(tmp)
        except OSError:
            pass
