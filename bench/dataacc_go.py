"""data-acc's Go `dacctl` (github.com/RSE-Cambridge/data-acc, cmd/dacctl), the peer issue 34
measures burst_buffer/datawarp's forwarder against: built once from its Go module source
through the Go module proxy, cached under CACHE, for bench/hot_path.py --datawarp.

    .venv/bin/python bench/dataacc_go.py      # builds it (or says exactly why it cannot)

data-acc's dacctl speaks the same dw_wlm_cli protocol (`--function pools`, `--function
job_process --job <script>`); it reads its etcd from ETCDCTL_ENDPOINTS. Pointed at the local
DAC's etcd, whose keys are dac's and not data-acc's, it finds an empty registry: what it
answers is printed beside its time, and it is timed whatever it answers.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

__all__ = ["MODULE", "CACHE", "build", "command"]

MODULE = "github.com/RSE-Cambridge/data-acc"
PACKAGE = f"{MODULE}/cmd/dacctl@latest"
CACHE = Path("/var/cache/dac-local/data-acc")


def _env() -> dict[str, str]:
    return {
        **os.environ,
        "GOFLAGS": "-mod=mod",
        "GOPATH": str(CACHE / "gopath"),
        "GOMODCACHE": str(CACHE / "mod"),
        "GOCACHE": str(CACHE / "build"),
        "GOBIN": str(CACHE / "bin"),
    }


def build() -> tuple[Path | None, str]:
    """(data-acc's dacctl, "") once built (once: then cached), else (None, the command and
    its error)."""
    binary = CACHE / "bin" / "dacctl"
    if binary.exists():
        return binary, ""
    CACHE.mkdir(parents=True, exist_ok=True)
    argv = ["go", "install", PACKAGE]
    try:
        r = subprocess.run(argv, env=_env(), capture_output=True, text=True, timeout=900)
    except (OSError, subprocess.TimeoutExpired) as e:
        return None, f"`{' '.join(argv)}`: {e}"
    if r.returncode != 0 or not binary.exists():
        env = " ".join(f"{k}={_env()[k]}" for k in ("GOFLAGS", "GOMODCACHE", "GOBIN"))
        return None, f"`{env} {' '.join(argv)}` (exit {r.returncode}): {r.stderr.strip()}"
    return binary, ""


def command(binary: Path, etcd_endpoints: str, function: str, *args: str) -> tuple[list, dict]:
    """(argv, environment) of one data-acc dacctl call against `etcd_endpoints`."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "ETCDCTL_ENDPOINTS": etcd_endpoints}
    return [str(binary), "--function", function, *args], env


if __name__ == "__main__":
    found, why = build()
    print(found if found else f"cannot build data-acc's dacctl: {why}")
    sys.exit(0 if found else 1)
