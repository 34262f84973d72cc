"""The etcd releases the local DAC and the tests run: 3.4 (Debian 12's etcd-server, the host's),
3.5 (Debian 13's etcd-server, its binary taken from the trixie package) and 3.6 (built from the
Go module proxy: a wrapper module whose main is etcdmain.Main; go.etcd.io/etcd/server/v3 cannot be
`go install`ed, its go.mod has replace directives).

Binaries are cached beside the Slurm chroots (daclocal.releases.cache_dir(), root's alone):
`etcd-<release>/etcd`, complete once its `.ok` stamp exists; a build holds a lock. 3.5 needs the
Slurm 24.11 chroot (Debian 13) to fetch its package; 3.6 needs a Go toolchain (go on PATH or
/usr/local/go/bin/go) and about 75 s of 2 cores, once.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import time
from pathlib import Path

from daccore.errors import AdminError
from daclocal import releases

__all__ = ["ETCD_RELEASES", "HOST_ETCD", "etcd_binary", "etcd_version"]

HOST_ETCD = "3.4"
ETCD_RELEASES = ("3.4", "3.5", "3.6")
#: the 3.6 release built from the module proxy
ETCD_36 = "v3.6.16"

_WRAPPER = """package main

import (
\t"os"

\t"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
"""


def etcd_binary(release: str | None) -> str:
    """The etcd binary of `release` (None: the host's), built or fetched now if not cached."""
    from daclocal.etcd_server import find_etcd
    name = release or HOST_ETCD
    if name not in ETCD_RELEASES:
        raise AdminError(f"unknown etcd release '{name}' (choose {', '.join(ETCD_RELEASES)})")
    if name == HOST_ETCD:
        return find_etcd()
    d = releases.cache_dir() / f"etcd-{name}"
    if (d / ".ok").exists():
        return str(d / "etcd")
    releases._root_only_dir(releases.cache_dir())
    with open(releases.cache_dir() / f".etcd-{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (d / ".ok").exists():
            started = time.monotonic()
            shutil.rmtree(d, ignore_errors=True)
            d.mkdir(mode=0o755, parents=True)
            log = releases.cache_dir() / f"etcd-{name}.log"
            log.write_text("")
            (_from_trixie if name == "3.5" else _from_module_proxy)(d, log)
            (d / ".ok").write_text(f"{etcd_version(str(d / 'etcd'))} in "
                                   f"{time.monotonic() - started:.0f}s\n")
    return str(d / "etcd")


def etcd_version(binary: str) -> str:
    r = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=30)
    for line in r.stdout.splitlines():
        if line.startswith("etcd Version:"):
            return line.split(":", 1)[1].strip()
    return "?"


def _from_trixie(d: Path, log: Path) -> None:
    """Debian 13's etcd-server package, downloaded inside the Slurm 24.11 chroot (same
    archive, same apt lists) and unpacked here; only its etcd binary is kept."""
    root = releases.ensure_chroot(releases.release("24.11"))
    work = d / "deb"
    work.mkdir()
    # under the chroot's /root (0700): its /tmp is any host user's to plant a link or a .deb in
    inside = f"/root/dac-etcd-deb-{os.getpid()}"
    shutil.rmtree(root / inside.lstrip("/"), ignore_errors=True)
    (root / inside.lstrip("/")).mkdir(mode=0o700)
    try:
        releases._run(["chroot", str(root), "sh", "-c",
                       f"cd {inside} && apt-get -q -o Acquire::Check-Valid-Until=false update "
                       "&& apt-get -q download etcd-server"], "apt-get download etcd-server",
                      log, 600)
        debs = list((root / inside.lstrip("/")).glob("etcd-server_*.deb"))
        if not debs:
            raise AdminError(f"Debian 13 has no etcd-server package (log: {log})")
        releases._run(["dpkg-deb", "-x", str(debs[0]), str(work)], "dpkg-deb -x", log, 120)
    finally:
        shutil.rmtree(root / inside.lstrip("/"), ignore_errors=True)
    binary = work / "usr/bin/etcd"
    if not binary.exists():
        raise AdminError(f"Debian 13's etcd-server package has no usr/bin/etcd (log: {log})")
    shutil.move(str(binary), d / "etcd")
    shutil.rmtree(work)


def _go() -> str:
    go = shutil.which("go") or shutil.which("go", path="/usr/local/go/bin")
    if not go:
        raise AdminError("etcd 3.6 is built from the Go module proxy and needs Go 1.24 or "
                         "later: install it (go on PATH or /usr/local/go/bin/go)")
    return go


def _from_module_proxy(d: Path, log: Path) -> None:
    """A module requiring go.etcd.io/etcd/server/v3, whose main calls etcdmain.Main."""
    go = _go()
    src = d / "src"
    src.mkdir()
    (src / "main.go").write_text(_WRAPPER)
    cache = releases.cache_dir() / "go"  # module and build caches: a rebuild takes seconds
    env = {**os.environ, "GOPATH": str(cache / "path"), "GOCACHE": str(cache / "build"),
           "GOFLAGS": "-mod=mod -buildvcs=false", "CGO_ENABLED": "0"}
    for argv, what in (([go, "mod", "init", "dacetcd"], "go mod init"),
                       ([go, "get", f"go.etcd.io/etcd/server/v3@{ETCD_36}"], "go get"),
                       ([go, "build", "-trimpath", "-o", str(d / "etcd"), "."], "go build")):
        with open(log, "ab") as out:
            r = subprocess.run(argv, cwd=src, env=env, stdout=out, stderr=subprocess.STDOUT,
                               timeout=1800)
        if r.returncode:
            tail = log.read_text(errors="replace").strip().splitlines()[-1:] or ["?"]
            raise AdminError(f"building etcd {ETCD_36}: {what} failed: {tail[0]} (log: {log})")
    shutil.rmtree(src)
