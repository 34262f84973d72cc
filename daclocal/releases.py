"""The Slurm releases the local DAC runs: the host's own (Debian 12's 22.05) and, from a Debian
minbase chroot built on first use and cached, 24.11 (Debian 13, trixie) and 26.05 (forky).

A chroot release's munged, slurmctld and slurmd start in a mount namespace of their own
(`daemon_argv`): the chroot sees the host's /dev, /sys, its own /proc, the host's /tmp and /home
(where jobs and users work), the local DAC's workdir, the host's Python and dac (read-only, so
the hooks run the same dacctl; Debian's own /usr/bin/python3 comes in as its interpreter file
and standard library, not its /usr: `_host_python_paths`) and the host's users (/etc/passwd,
/etc/group), all at the same paths as on the host; the chroot is bound at its own path too, so
one slurm.conf's PluginDir serves the daemons inside and the client commands outside. Those
(`write_client_wrappers`) run the chroot's binaries with its own dynamic loader and libraries:
no privilege, so every user submits with the release's own sbatch (a 22.05 client cannot talk
to a 24.11 slurmctld).

The cache is /var/cache/dac-local (DAC_LOCAL_CACHE overrides it), root's alone: one directory per
release, `slurm-<release>`, complete once its `.ok` stamp exists; a build holds a lock, so two
`up` at once build it once. Facts this relies on: docs/local-dac.md, "Other Slurm and etcd
releases", and docs/slurm.md, "Releases".
"""

from __future__ import annotations

import fcntl
import os
import re
import shlex
import shutil
import stat
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from daccore.errors import AdminError
from daclocal import fetching

__all__ = [
    "Release",
    "RELEASES",
    "HOST_RELEASE",
    "release",
    "cache_dir",
    "ensure_chroot",
    "daemon_argv",
    "write_client_wrappers",
    "CLIENTS",
]


@dataclass(frozen=True)
class Release:
    name: str  # "24.11"
    suite: str = ""  # Debian suite of its chroot; "" = the host's own packages
    script: str = ""  # debootstrap's script for the suite (forky has none yet: sid's)
    slurm_user: str = "root"  # SlurmUser: Debian 13 and later run slurmctld as slurm

    @property
    def host(self) -> bool:
        return not self.suite

    @property
    def at_least_24_05(self) -> bool:
        major, minor = (int(x) for x in self.name.split("."))
        return (major, minor) >= (24, 5)


HOST_RELEASE = "22.05"
RELEASES = {
    "22.05": Release("22.05"),
    "24.11": Release("24.11", "trixie", "trixie", slurm_user="slurm"),
    "26.05": Release("26.05", "forky", "sid", slurm_user="slurm"),
}

#: what the chroot gets besides debootstrap's minbase: Slurm and munge, and the shared
#: libraries the host's Python needs to run dacctl from the hooks (ssl, ctypes, sqlite, ...)
PACKAGES = (
    "slurmctld",
    "slurmd",
    "slurm-client",
    "munge",
    "libffi8",
    "libsqlite3-0",
    "libssl3t64",
    "libexpat1",
    "libbz2-1.0",
    "liblzma5",
    "zlib1g",
    "libuuid1",
    "libcrypt1",
    # burst_buffer.lua reaches dac's answerer in-process with it (Lua 5.1's socket library)
    "lua-socket",
    # burst_buffer/datawarp's GetSysState forwarder to it (slurm-plugin/dw_wlm_cli.lua's #!)
    "lua5.1",
)
#: PACKAGES that chroots cached before them lack: `ensure_chroot` adds them to such a chroot
#: at its next use (one `apt-get install`, a few seconds), so no cache is rebuilt for them
ADDED_LATER = ("lua-socket", "lua5.1")
#: the client commands `dacctl local env` puts first on PATH
CLIENTS = (
    "sbatch",
    "srun",
    "salloc",
    "scontrol",
    "squeue",
    "scancel",
    "sinfo",
    "sacct",
    "sprio",
    "sstat",
    "sshare",
    "sattach",
    "sbcast",
)
_LIB = "usr/lib/x86_64-linux-gnu"
#: the host's CA bundle (daclocal.fetching.ca_bundle), copied into each chroot for its downloads
CHROOT_CA = "/etc/ssl/certs/dac-local-ca.crt"
_LOADER = "lib64/ld-linux-x86-64.so.2"

#: where a chroot build reports progress for the admin (one line per call)
ProgressLog = Callable[[str], object]


def release(name: str | None) -> Release:
    """The release called `name` (None: the host's); AdminError naming the known ones."""
    r = RELEASES.get(name or HOST_RELEASE)
    if r is None:
        raise AdminError(f"unknown Slurm release '{name}' (choose {', '.join(RELEASES)})")
    return r


def cache_dir() -> Path:
    return Path(os.environ.get("DAC_LOCAL_CACHE") or "/var/cache/dac-local")


def chroot_dir(rel: Release) -> Path:
    return cache_dir() / f"slurm-{rel.name}"


def _root_only_dir(d: Path) -> None:
    """`d` exists, is root's, and nobody else may write to it or any directory above it (the
    local DAC runs what is in it as root); readable and searchable by all (users run its
    client commands)."""
    d.mkdir(mode=0o755, parents=True, exist_ok=True)
    for p in [d, *d.parents]:
        st = os.lstat(p)
        if (
            not stat.S_ISDIR(st.st_mode)
            or st.st_uid != 0
            or (st.st_mode & 0o022 and not (p != d and st.st_mode & stat.S_ISVTX))
        ):
            raise AdminError(
                f"{p} is not a directory of root's alone (owner uid {st.st_uid}, "
                f"mode {st.st_mode & 0o7777:04o}); refused as the Slurm chroot "
                "cache: set DAC_LOCAL_CACHE to a directory only root can change"
            )


def _mirror() -> str:
    """The Debian archive this machine's apt uses (the chroots come from the same source)."""
    for f in sorted(Path("/etc/apt").glob("sources.list.d/*.sources")) + [
        Path("/etc/apt/sources.list")
    ]:
        try:
            text = f.read_text()
        except OSError:
            continue
        for line in text.splitlines():
            words = line.split()
            if words[:1] in (["URIs:"], ["deb"]):
                for w in words[1:]:
                    if "://" in w and w.rstrip("/").endswith("/debian"):
                        return w
    return "http://deb.debian.org/debian"


def _run(
    argv: list[str], what: str, log: Path, timeout: float, extra_env: dict[str, str] | None = None
) -> None:
    """`argv`, its output to `log`, with the site's proxy and CA settings (daclocal.fetching):
    what runs here downloads."""
    with open(log, "ab") as out:
        out.write(f"\n$ {shlex.join(argv)}\n".encode())
        out.flush()
        try:
            r = subprocess.run(
                argv,
                stdout=out,
                stderr=subprocess.STDOUT,
                timeout=timeout,
                stdin=subprocess.DEVNULL,
                env={**fetching.env(), **(extra_env or {})},
            )
        except subprocess.TimeoutExpired:
            raise AdminError(
                f"building the Slurm chroot: {what} took over {timeout:.0f}s (log: {log})"
            ) from None
        except FileNotFoundError:
            raise AdminError(
                f"building the Slurm chroot: {argv[0]} is not installed: run "
                "`make deps` (installs debootstrap)"
            ) from None
    if r.returncode != 0:
        tail = log.read_text(errors="replace").strip().splitlines()[-1:] or ["?"]
        raise AdminError(f"building the Slurm chroot: {what} failed: {tail[0]} (log: {log})")


def ensure_chroot(rel: Release, log: ProgressLog | None = None) -> Path:
    """The release's chroot, built now if the cache has none (about a minute and 280 MB)."""
    root = chroot_dir(rel)
    if (root / ".ok").exists() and not _missing(root):
        return root
    cache = cache_dir()
    _root_only_dir(cache)
    with open(cache / f".slurm-{rel.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another `up` may be building it: wait for it
        try:
            if (root / ".ok").exists():
                missing = _missing(root)
                if missing:
                    _add_packages(rel, root, missing, cache, log)
                return root
            return _build_chroot(rel, root, cache, log)
        except OSError as e:  # one line for the admin, never a traceback
            raise AdminError(
                f"building the Slurm {rel.name} chroot: {e} "
                f"(log: {cache / f'slurm-{rel.name}.log'})"
            ) from e


def _build_chroot(rel: Release, root: Path, cache: Path, log: ProgressLog | None) -> Path:
    """debootstrap, then Slurm and the libraries the host's Python needs, in `cache`'s
    `slurm-<release>.build`, renamed to `root` once whole."""
    if log:
        log(
            f"building the Slurm {rel.name} chroot (Debian {rel.suite}) in {root}: "
            "about a minute, once"
        )
    started = time.monotonic()
    build = cache / f"slurm-{rel.name}.build"
    blog = cache / f"slurm-{rel.name}.log"
    blog.write_text("")
    shutil.rmtree(build, ignore_errors=True)
    shutil.rmtree(root, ignore_errors=True)
    script = f"/usr/share/debootstrap/scripts/{rel.script}"
    _run(
        ["debootstrap", "--variant=minbase", rel.suite, str(build), _mirror(), script],
        "debootstrap",
        blog,
        900,
        fetching.wgetrc(cache),
    )
    # no daemon may start inside while packages install; names resolve as on the host
    policy = build / "usr/sbin/policy-rc.d"
    policy.write_text("#!/bin/sh\nexit 101\n")
    policy.chmod(0o755)
    # a testing suite's Release file may be past its Valid-Until on the mirror served here
    apt_conf = 'Acquire::Check-Valid-Until "false";\n'
    # an https mirror is trusted as the host trusts it (a TLS-re-signing proxy's CA too)
    bundle = fetching.ca_bundle()
    if bundle:  # minbase has no ca-certificates, so no /etc/ssl/certs either
        (build / CHROOT_CA.lstrip("/")).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(bundle, build / CHROOT_CA.lstrip("/"))
        apt_conf += f'Acquire::https::CAInfo "{CHROOT_CA}";\n'
    (build / "etc/apt/apt.conf.d/99dac-local").write_text(apt_conf)
    for f in ("etc/resolv.conf", "etc/hosts"):
        (build / f).unlink(missing_ok=True)
        shutil.copy(f"/{f}", build / f)
    _apt_install(build, PACKAGES, blog)
    version = subprocess.run(
        ["chroot", str(build), "dpkg-query", "-W", "-f", "${Version}", "slurmctld"],
        capture_output=True,
        text=True,
    )
    if not version.stdout.startswith(rel.name):
        raise AdminError(
            f"building the Slurm chroot: Debian {rel.suite} has slurmctld "
            f"{version.stdout or '(none)'}, not {rel.name} (log: {blog})"
        )
    build.rename(root)
    (root / ".ok").write_text(
        f"slurmctld {version.stdout} built in {time.monotonic() - started:.0f}s\n"
    )
    return root


def _apt_install(root: Path, packages: Iterable[str], blog: Path) -> None:
    """`apt-get install` of `packages` inside the chroot at `root`, its lists fetched anew."""
    apt = (
        "DEBIAN_FRONTEND=noninteractive apt-get -q -o DPkg::Lock::Timeout=600 install "
        "-y --no-install-recommends " + " ".join(packages) + " && apt-get clean"
    )
    _run(
        [
            "unshare",
            "--mount",
            "--propagation",
            "private",
            "--",
            "sh",
            "-c",
            'mount -t proc proc "$1/proc" && exec chroot "$1" sh -c "$2"',
            "sh",
            str(root),
            "apt-get update -q && " + apt,
        ],
        "apt-get install",
        blog,
        900,
    )


def _missing(root: Path) -> list[str]:
    """The packages of ADDED_LATER that the chroot at `root` has not installed (read from its
    dpkg status file: no process)."""
    try:
        status = (root / "var/lib/dpkg/status").read_text(errors="replace")
    except OSError:
        return list(ADDED_LATER)
    installed = set(
        re.findall(r"^Package: (\S+)\n(?:[^\n]+\n)*?Status: install ok installed", status, re.M)
    )
    return [p for p in ADDED_LATER if p not in installed]


def _add_packages(
    rel: Release, root: Path, packages: list[str], cache: Path, log: ProgressLog | None
) -> None:
    """`packages` into a cached chroot that predates them (ADDED_LATER), in place."""
    if log:
        log(f"adding {', '.join(packages)} to the cached Slurm {rel.name} chroot {root}")
    started = time.monotonic()
    blog = cache / f"slurm-{rel.name}.log"
    _apt_install(root, packages, blog)
    left = _missing(root)
    if left:
        raise AdminError(
            f"the Slurm {rel.name} chroot: {', '.join(left)} not installed (log: {blog})"
        )
    with open(root / ".ok", "a") as ok:
        ok.write(f"{' '.join(packages)} added in {time.monotonic() - started:.0f}s\n")


def version(rel: Release) -> str:
    """The release's Slurm package version, e.g. 24.11.5-4."""
    if rel.host:
        r = subprocess.run(
            ["dpkg-query", "-W", "-f", "${Version}", "slurmctld"], capture_output=True, text=True
        )
        return r.stdout.strip()
    words = (chroot_dir(rel) / ".ok").read_text().split()
    return words[1] if len(words) > 1 else "?"


def _host_python_paths() -> tuple[list[str], list[str]]:
    """(directories, files) of the host's that the hooks' dacctl needs inside a chroot: its
    interpreter's prefix (the stdlib, the library it links), every directory on sys.path (the
    venv, an editable checkout) and dac itself. An interpreter whose prefix is /usr (Debian's
    own, as a site installs dac) cannot bring that prefix: bound over the chroot's /usr it would
    replace the release's Slurm with the host's. It brings its own pieces instead, at the same
    paths: the interpreter by every name the venv reaches it (files), its standard library, and
    Debian's /etc/pythonX.Y (the stdlib's sitecustomize links there)."""
    import daccore

    exe = Path(sys.executable)
    found = {
        sys.base_prefix,
        sys.prefix,
        str(exe.resolve().parent.parent),
        str(Path(daccore.__file__).resolve().parent.parent),
        *sys.path,
    }
    dirs = {os.path.realpath(p) for p in found if p and os.path.isdir(p)}
    files: list[str] = []
    if dirs & _SYSTEM_PREFIXES:
        dirs -= _SYSTEM_PREFIXES | {"/usr/bin", "/usr/lib", "/usr/local"}
        for start in (sys.executable, getattr(sys, "_base_executable", sys.executable)):
            files += [p for p in _link_chain(start) if p.startswith("/usr/")]
        etc = Path("/etc") / f"python{sys.version_info[0]}.{sys.version_info[1]}"
        if etc.is_dir():
            dirs.add(str(etc))
    return _outermost(dirs), sorted(set(files))


#: prefixes a chroot keeps its own of (its /usr holds the release's Slurm)
_SYSTEM_PREFIXES = {"/", "/usr"}


def _link_chain(path: str) -> list[str]:
    """`path` and every name its symbolic links lead through, as absolute paths."""
    chain = [os.path.abspath(path)]
    while os.path.islink(chain[-1]) and len(chain) < 40:
        target = os.readlink(chain[-1])
        chain.append(os.path.normpath(os.path.join(os.path.dirname(chain[-1]), target)))
    return chain


def _outermost(paths: Iterable[str]) -> list[str]:
    """`paths` without any that lie inside another, and without / itself."""
    out: list[str] = []
    for p in sorted({os.path.normpath(p) for p in paths if p and p != "/"}):
        if not any(p == o or p.startswith(o + "/") for o in out):
            out.append(p)
    return out


#: the namespace a chroot daemon starts in (positional arguments: none; every path below is
#: ours, quoted by shlex; a user's words never reach it)
_MOUNT = """set -e
R={root}
{node}
mount -t proc proc "$R/proc"
for d in /dev /sys; do mount --rbind "$d" "$R$d"; mount --make-rslave "$R$d"; done
for d in {shared}; do
  mkdir -p "$R$d"; mount --rbind "$d" "$R$d"; mount --make-rslave "$R$d"
done
# the rbind copied every mount under /tmp, other local DACs' buffers among them; on a host whose
# / is not a shared mount their unmounts never reach this copy, which would pin their devices
# past their teardowns: only this DAC's own stay
awk '{{print $5}}' /proc/self/mountinfo | sort -r | while read -r m; do
  case "$m" in "$R"{own}|"$R"{own}/*) continue;; esac
  case "$m" in "$R"/tmp/*) umount -l "$m" || true;; esac
done
{private_root}
for d in {readonly}; do
  mkdir -p "$R$d"; mount --bind "$d" "$R$d"; mount -o remount,bind,ro "$R$d"
done
for f in {readonly_files}; do
  if [ -L "$R$f" ] || [ ! -f "$R$f" ]; then rm -f "$R$f"; mkdir -p "$R${{f%/*}}"; : > "$R$f"; fi
  mount --bind "$f" "$R$f"; mount -o remount,bind,ro "$R$f"
done
for f in /etc/passwd /etc/group /etc/hosts /etc/resolv.conf; do
  mount --bind "$f" "$R$f"; mount -o remount,bind,ro "$R$f"
done
exec chroot {userspec} "$R" "$@"
"""


def daemon_argv(
    rel: Release,
    workdir: Path,
    argv: list[str],
    user: str = "root",
    node_view: tuple[str, str] | None = None,
) -> list[str]:
    """`argv` (a path inside the chroot and its arguments) run as `user` in the release's
    chroot; `node_view` = (a node's root, the mount root): the node sees its own root there,
    with dacd's later mounts propagated (daclocal.slurm)."""
    root = str(chroot_dir(rel))
    q = shlex.quote
    shared = _outermost(
        [d for d in ("/tmp", "/home", str(Path(workdir).resolve())) if os.path.isdir(d)]
    )
    python_dirs, python_files = _host_python_paths()
    readonly = [p for p in python_dirs if not any(p == s or p.startswith(s + "/") for s in shared)]
    # the chroot at its own path too: slurm.conf's PluginDir names the chroot's plugins
    readonly = _outermost(readonly + [root])
    node = ""
    if node_view:
        node = f"mount --bind {q(node_view[0])} {q(node_view[1])}"
    # /root is 0700: a SlurmUser other than root runs the host's Python from under it only
    # through a searchable stand-in (a tmpfs, in this namespace alone)
    private_root = ""
    if any(p.startswith("/root/") for p in readonly):
        private_root = 'mount -t tmpfs -o mode=0711 tmpfs "$R/root"'
    userspec = "" if user == "root" else f"--userspec={q(user)}:{q(user)}"
    script = _MOUNT.format(
        own=q(str(Path(workdir).resolve())),
        root=q(root),
        node=node,
        shared=" ".join(q(d) for d in shared),
        readonly=" ".join(q(d) for d in readonly),
        readonly_files=" ".join(q(f) for f in python_files),
        private_root=private_root,
        userspec=userspec,
    )
    return ["unshare", "--mount", "--propagation", "slave", "--", "sh", "-c", script, "sh", *argv]


def plugin_dir(rel: Release) -> str:
    return str(chroot_dir(rel) / _LIB / "slurm-wlm")


_WRAPPER = """#!/bin/sh
# Slurm {release}'s {name}, run from the local DAC's chroot by its own loader and libraries.
exec {loader} --argv0 {name} --library-path {libs} {binary} "$@"
"""


def write_client_wrappers(rel: Release, bindir: Path) -> None:
    """One wrapper per client command in `bindir` (root's, 0755): anyone may run them."""
    root = chroot_dir(rel)
    libs = ":".join(str(root / d) for d in (f"{_LIB}/slurm-wlm", _LIB, "lib/x86_64-linux-gnu"))
    bindir.mkdir(mode=0o755, parents=True, exist_ok=True)
    os.chmod(bindir, 0o755)
    for name in CLIENTS:
        binary = root / "usr/bin" / name
        if not binary.exists():
            continue
        path = bindir / name
        path.write_text(
            _WRAPPER.format(
                release=rel.name,
                name=name,
                loader=shlex.quote(str(root / _LOADER)),
                libs=shlex.quote(libs),
                binary=shlex.quote(str(binary)),
            )
        )
        path.chmod(0o755)
