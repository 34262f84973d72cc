"""Where the config comes from and how the environment overlays it: what `daccore.settings.config`
(the validating reader, pydantic and yaml) and `daccore.settings.cache` (the hooks' cached reader,
standard library only) both need, so each imports this and neither imports the other's dependencies.
Standard library only."""

from __future__ import annotations

import os

TYPE_CHECKING = False  # typing's own, without importing typing on the hooks' path; mypy: True
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

__all__ = ["DEFAULT_PATH", "config_path", "apply_env", "etcd_urls"]

DEFAULT_PATH = "/etc/dac/dac.yaml"


def config_path(path: str | None = None, env: Mapping[str, str] | None = None) -> str:
    """The file the config comes from: the argument, else $DAC_CONFIG, else the default."""
    env = os.environ if env is None else env
    return path or env.get("DAC_CONFIG") or DEFAULT_PATH


def apply_env(data: dict[str, Any], env: Mapping[str, str]) -> dict[str, Any]:
    """Overlay the environment on config data, as etcdctl does: DAC_ETCD_ENDPOINTS, else
    ETCDCTL_ENDPOINTS; ETCDCTL_CACERT/CERT/KEY."""
    etcd = data.setdefault("etcd", {})
    if not isinstance(etcd, dict):
        return data
    endpoints = env.get("DAC_ETCD_ENDPOINTS") or env.get("ETCDCTL_ENDPOINTS")
    if endpoints:
        etcd["endpoints"] = [e.strip() for e in endpoints.split(",") if e.strip()]
    for name in ("cacert", "cert", "key"):
        if env.get(f"ETCDCTL_{name.upper()}"):
            etcd[name] = env[f"ETCDCTL_{name.upper()}"]
    return data


def etcd_urls(endpoints: list[str], tls: bool) -> list[str]:
    """Endpoints with a scheme: https when TLS files are given and none is written."""
    scheme = "https" if tls else "http"
    return [e if "://" in e else f"{scheme}://{e}" for e in endpoints]
