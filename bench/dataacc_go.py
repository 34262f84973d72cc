"""data-acc's Go `dacctl` (github.com/RSE-Cambridge/data-acc, cmd/dacctl), the peer issue 34
measures burst_buffer/datawarp's forwarder against (bench/hot_path.py --datawarp): built once
from a source checkout, cached as CACHE/bin/dacctl (CACHE/bin/dacctl.built says from what).

The Go module proxy does not serve data-acc's own module (`go install
github.com/RSE-Cambridge/data-acc/cmd/dacctl@latest` gets 403), so the build starts from its
source. Get it with a clone at the commit measured:

    git clone https://github.com/RSE-Cambridge/data-acc /tmp/data-acc
    git -C /tmp/data-acc checkout 0ab759d6392a4a3abdd5048007d63f58b3dff205

then, as root (CACHE is root's):

    .venv/bin/python bench/dataacc_go.py --src /tmp/data-acc     # build from this checkout
    .venv/bin/python bench/dataacc_go.py --clone /tmp/data-acc   # or: extract COMMIT from a
                                                                 # clone (bare too) into CACHE
    .venv/bin/python bench/dataacc_go.py --rebuild --src DIR     # build again over the cache

(or DAC_DATAACC_SRC=DIR / DAC_DATAACC_CLONE=PATH in the environment; without either, the cached
binary or a message saying how to get the source). The build, in the source directory:

    GOTOOLCHAIN=local GOFLAGS=-mod=vendor go build -trimpath -o CACHE/bin/dacctl ./cmd/dacctl

-mod=vendor since data-acc commits its vendor/ tree (the go.sum versions: no network); a
source without vendor/ builds with GOFLAGS=-mod=mod, its dependencies (etcd v3.3.22, grpc
v1.26.0, ...) from the Go module proxy (both build with Go 1.26, GOTOOLCHAIN=local). About two
minutes of two cores, once.

data-acc's dacctl speaks the dw_wlm_cli words (`--function pools`, `--function job_process
--job <script>`, its cmd/dacctl/main.go); it finds etcd in ETCDCTL_ENDPOINTS (else
ETCD_ENDPOINTS; certificates from ETCDCTL_CERT_FILE, ETCDCTL_KEY_FILE, ETCDCTL_CA_FILE, no
user/password, internal/pkg/config/keystore.go) and logs every call to DACCTL_LOG (default
/var/log/dacctl.log). The local DAC's etcd has RBAC over dac's prefix, so `etcd()` starts a
second, plain etcd on loopback for data-acc alone and registers in it what the local DAC has:
pool `default`, two brick hosts alive with four 512 MiB bricks each (data-acc's keys, as its
dacd would write them).
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
import tempfile
import urllib.request
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

__all__ = ["REPO", "COMMIT", "CACHE", "build", "command", "etcd"]

REPO = "https://github.com/RSE-Cambridge/data-acc"
#: the commit measured (its HEAD of 2023-03-30, "Update README.md (#146)")
COMMIT = "0ab759d6392a4a3abdd5048007d63f58b3dff205"
CACHE = Path("/var/cache/dac-local/data-acc")
BINARY = CACHE / "bin" / "dacctl"
HOW = (
    f"give data-acc's source: `git clone {REPO} DIR && git -C DIR checkout {COMMIT}`, then "
    "`bench/dataacc_go.py --src DIR` (or DAC_DATAACC_SRC=DIR, or --clone/DAC_DATAACC_CLONE=DIR)"
)


def _env(src: Path) -> dict[str, str]:
    vendored = (src / "vendor" / "modules.txt").exists()
    return {
        **os.environ,
        "GOTOOLCHAIN": "local",
        "GOFLAGS": "-mod=vendor" if vendored else "-mod=mod",
        "GOPATH": str(CACHE / "gopath"),
        "GOMODCACHE": str(CACHE / "mod"),
        "GOCACHE": str(CACHE / "build"),
    }


def _extract(clone: Path) -> Path:
    """COMMIT of the clone (or bare repository) `clone`, extracted under CACHE."""
    out = CACHE / f"src-{COMMIT[:12]}"
    if not (out / "go.mod").exists():
        tmp = Path(tempfile.mkdtemp(prefix="src-", dir=CACHE))
        tmp.chmod(0o755)
        archive = subprocess.run(
            ["git", "-C", str(clone), "archive", COMMIT], check=True, capture_output=True
        ).stdout
        subprocess.run(["tar", "-x", "-C", str(tmp)], input=archive, check=True)
        shutil.rmtree(out, ignore_errors=True)
        tmp.rename(out)
    return out


def _commit(src: Path) -> str:
    r = subprocess.run(["git", "-C", str(src), "rev-parse", "HEAD"], capture_output=True, text=True)
    return r.stdout.strip() if r.returncode == 0 else "?"


def build(
    src: str | None = None, clone: str | None = None, rebuild: bool = False
) -> tuple[Path | None, str]:
    """(data-acc's dacctl, "") once built (then cached), else (None, why: the command and its
    error, or how to get the source). `src`/`clone` default to DAC_DATAACC_SRC/_CLONE."""
    src = src or os.environ.get("DAC_DATAACC_SRC")
    clone = clone or os.environ.get("DAC_DATAACC_CLONE")
    if BINARY.exists() and not rebuild:
        return BINARY, ""
    if not src and not clone:
        return None, f"not built yet: {HOW}"
    CACHE.mkdir(parents=True, exist_ok=True)
    try:
        source = Path(src) if src else _extract(Path(clone or ""))
    except (OSError, subprocess.CalledProcessError) as e:
        err = getattr(e, "stderr", b"") or b""
        return None, f"cannot extract {COMMIT} from {clone}: {e} {err.decode().strip()}"
    commit = _commit(source) if src else COMMIT
    argv = ["go", "build", "-trimpath", "-o", str(BINARY), "./cmd/dacctl"]
    env = _env(source)
    said = f"`cd {source} && GOTOOLCHAIN=local GOFLAGS={env['GOFLAGS']} {' '.join(argv)}`"
    try:
        r = subprocess.run(argv, cwd=source, env=env, capture_output=True, text=True, timeout=1800)
    except (OSError, subprocess.TimeoutExpired) as e:
        return None, f"{said}: {e}"
    if r.returncode != 0 or not BINARY.exists():
        return None, f"{said} (exit {r.returncode}): {r.stderr.strip()[-2000:]}"
    BINARY.with_name("dacctl.built").write_text(f"{REPO} at {commit}, source {source}\n{said}\n")
    return BINARY, ""


def command(
    binary: Path, etcd_endpoints: str, log: Path, function: str, *args: str
) -> tuple[list, dict]:
    """(argv, environment) of one data-acc dacctl call against `etcd_endpoints` (plain), its
    log appended to `log`."""
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "ETCDCTL_ENDPOINTS": etcd_endpoints,
        "DACCTL_LOG": str(log),
    }
    return [str(binary), "--function", function, *args], env


#: what the local DAC has (bench/common.py local_dac): 2 servers x 4 bricks of 512 MiB
HOSTS, BRICKS, BRICK_BYTES = ("dac1", "dac2"), 4, 512 << 20


@contextmanager
def etcd(workdir: Path) -> Iterator[str]:
    """A plain etcd on loopback for data-acc alone (the cached 3.5 if there, as the local DAC
    may run it, else the host's), pool `default` registered in it; yields its endpoint."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from daclocal.etcd_server import EtcdServer

    cached = CACHE.parent / "etcd-3.5"
    binary = str(cached / "etcd") if (cached / ".ok").exists() else None
    server = EtcdServer(workdir, secure=False, binary=binary, name="data-acc").start()
    try:
        keys: dict[str, object] = {
            "/Pool/default": {"Name": "default", "GranularityBytes": BRICK_BYTES}
        }
        for host in HOSTS:
            bricks = [
                {
                    "Device": f"nvme{i}n1",
                    "BrickHostName": host,
                    "PoolName": "default",
                    "CapacityGiB": 1,
                }
                for i in range(BRICKS)
            ]
            keys[f"/BrickHostStore/{host}"] = {"Name": host, "Bricks": bricks, "Enabled": True}
            keys[f"/BrickHostAlive/{host}"] = "true"
        for key, value in keys.items():
            raw = value if isinstance(value, str) else json.dumps(value)
            body = {"key": base64.b64encode(key.encode()).decode()}
            body["value"] = base64.b64encode(raw.encode()).decode()
            req = urllib.request.Request(
                f"{server.endpoint}/v3/kv/put", json.dumps(body).encode(), method="POST"
            )
            urllib.request.urlopen(req, timeout=10).read()
        yield server.endpoint
    finally:
        server.stop()


def main(argv: list[str]) -> int:
    if "-h" in argv or "--help" in argv:
        print(__doc__)
        return 0

    def value(flag: str) -> str | None:
        return argv[argv.index(flag) + 1] if flag in argv[:-1] else None

    found, why = build(value("--src"), value("--clone"), "--rebuild" in argv)
    if found:
        built = found.with_name("dacctl.built")
        print(f"{found}: {built.read_text().strip() if built.exists() else ''}")
    else:
        print(f"cannot build data-acc's dacctl: {why}")
    return 0 if found else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
