"""The etcd releases the local DAC and the tests run: 3.4 (Debian 12's etcd-server, the host's),
3.5 (Debian 13's etcd-server, its binary taken from the trixie package) and 3.6 (built from the
Go module proxy: a wrapper module whose main is etcdmain.Main; go.etcd.io/etcd/server/v3 cannot be
`go install`ed, its go.mod has replace directives).

Binaries are cached beside the Slurm chroots (daclocal.releases.cache_dir(), root's alone):
`etcd-<release>/etcd`, complete once its `.ok` stamp exists; a build holds a lock. 3.5 needs the
Slurm 24.11 chroot (Debian 13) to fetch its package; 3.6 a Go toolchain, 1.23 or later: the
host's (go on PATH or /usr/local/go/bin/go), else Debian 13's golang-go installed in the 24.11
chroot (Debian 12's 1.19 is too old), and about 75 s of 2 cores, once.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import time
from pathlib import Path

from daccore.errors import AdminError
from daclocal import fetching, releases

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
            (d / ".ok").write_text(
                f"{etcd_version(str(d / 'etcd'))} in {time.monotonic() - started:.0f}s\n"
            )
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
        releases._run(
            [
                "chroot",
                str(root),
                "sh",
                "-c",
                f"cd {inside} && apt-get -q -o Acquire::Check-Valid-Until=false update "
                "&& apt-get -q download etcd-server",
            ],
            "apt-get download etcd-server",
            log,
            600,
        )
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


def _host_go() -> str | None:
    """The host's go, if it is 1.23 or later (what etcd 3.6 needs)."""
    import re

    go = shutil.which("go") or shutil.which("go", path="/usr/local/go/bin")
    if not go:
        return None
    r = subprocess.run([go, "env", "GOVERSION"], capture_output=True, text=True)
    m = re.fullmatch(r"go1\.([0-9]+)(\.[0-9]+)?\S*", r.stdout.strip())
    return go if m and int(m.group(1)) >= 23 else None


def _from_module_proxy(d: Path, log: Path) -> None:
    """A module requiring go.etcd.io/etcd/server/v3, whose main calls etcdmain.Main; built by
    the host's Go, else by Debian 13's inside the Slurm 24.11 chroot."""
    cache = releases.cache_dir() / "go"  # module and build caches (~630 MB): gone once built
    go = _host_go()
    if go is None:
        root = releases.ensure_chroot(releases.release("24.11"))
        releases._run(
            [
                "chroot",
                str(root),
                "sh",
                "-c",
                "command -v go >/dev/null || "
                "DEBIAN_FRONTEND=noninteractive apt-get -q install -y "
                "--no-install-recommends golang-go ca-certificates",
            ],
            "apt-get install golang-go (Debian 13's Go)",
            log,
            900,
        )
        # the build happens in the chroot's root-only /root, caches and all
        inside = Path("/root/dac-etcd-build")
        shutil.rmtree(root / inside.relative_to("/"), ignore_errors=True)
        src, gocache, out = root / inside.relative_to("/") / "src", inside / "go", inside / "etcd"
        # the host's trust store (SSL_CERT_FILE's first): the module proxy is reached as the
        # host reaches it, through a TLS-re-signing proxy too
        bundle = fetching.ca_bundle()
        if bundle is None:
            raise AdminError(
                "building etcd: no CA bundle to reach the Go module proxy with: "
                "install ca-certificates or set SSL_CERT_FILE"
            )
        (root / inside.relative_to("/")).mkdir(mode=0o700, parents=True)
        shutil.copy(bundle, root / inside.relative_to("/") / "ca.crt")
        # go finds its GOROOT through /proc/self/exe: a /proc of its own, in a namespace
        prefix = [
            "unshare",
            "--mount",
            "--propagation",
            "private",
            "--",
            "sh",
            "-c",
            'r=$1; shift; mount -t proc proc "$r/proc" && exec chroot "$r" "$@"',
            "sh",
            str(root),
            "env",
            "HOME=/root",
            "PATH=/usr/bin:/bin",
            f"SSL_CERT_FILE={inside}/ca.crt",
            f"GOPATH={gocache}/path",
            f"GOCACHE={gocache}/build",
        ]
        cwd_args = ["-C", str(inside / "src")]
    else:
        src, out, prefix, cwd_args = d / "src", d / "etcd", [], []
        gocache = cache
    src.mkdir(parents=True)
    (src / "main.go").write_text(_WRAPPER)
    # fetching.env: the site's proxies in both spellings, SSL_CERT_FILE for the host's Go (the
    # chroot's is given its copy above)
    env = {
        **fetching.env(),
        "GOPATH": str(gocache / "path"),
        "GOCACHE": str(gocache / "build"),
        "GOFLAGS": "-mod=mod -buildvcs=false",
        "CGO_ENABLED": "0",
        "GOTOOLCHAIN": "auto",
    }
    gobin = go or "go"
    steps = (
        ([gobin, "mod", "init", "dacetcd"], "go mod init"),
        ([gobin, "get", f"go.etcd.io/etcd/server/v3@{ETCD_36}"], "go get"),
        ([gobin, "build", "-trimpath", "-o", str(out), "."], "go build"),
    )
    for argv, what in steps:
        with open(log, "ab") as f:
            argv = [argv[0], *cwd_args, *argv[1:]] if cwd_args else argv
            r = subprocess.run(
                prefix + argv, cwd=src, env=env, stdout=f, stderr=subprocess.STDOUT, timeout=1800
            )
        if r.returncode:
            tail = log.read_text(errors="replace").strip().splitlines()[-1:] or ["?"]
            raise AdminError(f"building etcd {ETCD_36}: {what} failed: {tail[0]} (log: {log})")
    if go is None:
        built = root / inside.relative_to("/")
        shutil.move(str(built / "etcd"), d / "etcd")
        shutil.rmtree(built)
    else:
        shutil.rmtree(src)
        shutil.rmtree(cache, ignore_errors=True)
