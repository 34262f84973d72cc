"""A real Slurm on one machine for the local DAC: munged on a private socket, slurmctld,
and one slurmd per fake node (Debian's build allows several slurmd on one host), all on free
loopback ports, wired to dac through burst_buffer/lua (slurm-plugin/burst_buffer.lua) or
burst_buffer/datawarp (dacctl as its dw_wlm_cli). The release is the host's own 22.05, or 24.11
or 26.05 from a Debian chroot (daclocal.releases), whose daemons run inside it and whose client
commands `<workdir>/slurm/bin` wraps.

Everything lives under `<workdir>/slurm/`; processes run in the foreground of their own
sessions so their pids are ours to stop. Facts this relies on are in docs/local-dac.md and
docs/slurm.md.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from daccore.errors import AdminError
from daccore.share import asset
from dacctl.slurm_files import LUA_SCRIPT, lua_bytecode_of
from daclocal import releases
from daclocal.procs import child_env, free_port, is_running, spawn, stop_pid

__all__ = [
    "SlurmCluster",
    "SUBMIT_USER",
    "PLUGINS",
    "start_munged",
    "munge_socket",
    "check_chroot_reachable",
]

#: Slurm refuses burst buffers to root's jobs; demo and tests submit as this user.
SUBMIT_USER = "dacuser"
PLUGINS = ("lua", "datawarp")

#: `SlurmCluster.start`'s `on_started(name, pid)`, and the restarts' `on_started(pid)`
OnStarted = Callable[[str, int], object]
OnRestarted = Callable[[int], object]

_SLURM_CONF = """\
ClusterName=daclocal
SlurmctldHost=localhost
SlurmctldPort={ctld_port}
SlurmUser={slurm_user}
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={base}/munge/munge.socket
StateSaveLocation={base}/state
SlurmdSpoolDir={base}/spool/%n
SlurmctldPidFile={base}/run/slurmctld.pid
SlurmdPidFile={base}/run/slurmd-%n.pid
SlurmctldLogFile={base}/log/slurmctld.log
SlurmdLogFile={base}/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
DebugFlags=BurstBuffer
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
SchedulerParameters=batch_sched_delay=0,bf_interval=1
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
JobAcctGatherType=jobacct_gather/none
MpiDefault=none
ReturnToService=2
MailProg=/bin/true
PrivateData=jobs
BurstBufferType=burst_buffer/{plugin}
{plugin_dir}{nodes}
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
"""

# Directive=DW: burst_buffer/lua then hands DataWarp's #DW lines to the hooks unchanged.
# Flags=EnablePersistent: users may make persistent buffers with dacctl (settings/bb_policy.py).
# TeardownFailure: a job held by a failed setup or stage-in is torn down at once, so it keeps
# no pool capacity in Slurm or dac while held (issue 30; docs/slurm.md, "A job held by a
# failed setup or stage-in").
_BB_LUA = """\
Directive=DW
Flags=EnablePersistent,TeardownFailure
StageInTimeout=60
StageOutTimeout=60
OtherTimeout=60
"""

_BB_DATAWARP = """\
GetSysState={dacctl}
GetSysStatus={bbstat}
DefaultPool=default
Flags=EmulateCray,EnablePersistent,TeardownFailure
StageInTimeout=60
StageOutTimeout=60
OtherTimeout=60
ValidateTimeout=10
"""


#: 24.05+ with proctrack/linuxproc and task/none: no cgroup plugin either
_CGROUP_CONF = "CgroupPlugin=disabled\n"


def _binary(name: str, rel: releases.Release | None = None) -> str:
    if rel is not None and not rel.host:
        return f"/usr/sbin/{name}"  # inside the chroot
    path = shutil.which(name) or shutil.which(name, path="/usr/sbin:/usr/bin")
    if not path:
        raise AdminError(
            f"{name} is not installed: run `make deps` (installs Debian's slurmctld, "
            "slurmd, slurm-client and munge)"
        )
    return path


def check_chroot_reachable(rel: releases.Release) -> None:
    """AdminError, before anything is built or started, unless the release's SlurmUser may
    enter the chroot cache and every directory above it: slurmctld runs as that user and loads
    its plugins from the chroot (PluginDir); a cache it cannot enter (DAC_LOCAL_CACHE made
    0700) would otherwise end as `slurmctld exited (status 1)` with the cause in its log."""
    if rel.host or rel.slurm_user == "root":
        return
    cache = releases.cache_dir().resolve()
    for p in [cache, *cache.parents]:
        try:
            mode = os.stat(p).st_mode
        except FileNotFoundError:
            continue  # made 0755 when the chroot is built (releases._root_only_dir)
        if not mode & 0o001:
            where = "the chroot cache" if p == cache else f"the chroot cache {cache}'s parent"
            raise AdminError(
                f"Slurm {rel.name} runs as {rel.slurm_user}, who cannot enter "
                f"{where} {p} (mode {mode & 0o7777:04o}): chmod o+x {p}, or set "
                "DAC_LOCAL_CACHE to a directory every user may enter"
            )


def ensure_submit_user() -> pwd.struct_passwd:
    try:
        return pwd.getpwnam(SUBMIT_USER)
    except KeyError:
        r = subprocess.run(
            ["useradd", "--create-home", "--shell", "/bin/bash", SUBMIT_USER],
            capture_output=True,
            text=True,
        )
        if r.returncode != 0:
            raise AdminError(
                f"cannot create the submit user {SUBMIT_USER}: {r.stderr.strip()}"
            ) from None
        return pwd.getpwnam(SUBMIT_USER)


def munge_socket(workdir: Path) -> Path:
    """The local DAC's one munged socket: Slurm's (AuthInfo) and dac's user service's."""
    return Path(workdir).resolve() / "slurm" / "munge" / "munge.socket"


def start_munged(
    workdir: Path, timeout: float = 30.0, rel: releases.Release | None = None
) -> subprocess.Popen[bytes]:
    """Start the local DAC's munged (the release's own, for a chroot release), with a key of
    its own, on `munge_socket(workdir)`; returns once the socket answers. Every user may use
    it, as on a Slurm node."""
    base = Path(workdir).resolve() / "slurm"
    m = base / "munge"
    for sub in ("run", "log", "munge", "munge/key"):
        (base / sub).mkdir(parents=True, exist_ok=True)
    os.chmod(base, 0o755)
    os.chmod(m, 0o755)  # munged insists on these modes
    os.chmod(m / "key", 0o700)
    key = m / "key" / "munge.key"
    if not key.exists():
        key.write_bytes(os.urandom(1024))
        os.chmod(key, 0o400)
    argv = [
        _binary("munged", rel),
        "--foreground",
        "--force",
        f"--socket={m}/munge.socket",
        f"--key-file={key}",
        f"--pid-file={base}/run/munged.pid",
        f"--log-file={base}/log/munged.log",
        f"--seed-file={m}/munged.seed",
        # the address each credential carries (ENCODE_HOST): the nodes' NodeAddr, which is
        # what the user service checks an in-job stage's origin against (daccore.services.injob)
        "--origin=127.0.0.1",
    ]
    if rel is not None and not rel.host:
        argv = releases.daemon_argv(rel, workdir, argv)
    proc = spawn(argv, base / "log" / "munged.out")
    deadline = time.monotonic() + timeout
    while not (m / "munge.socket").exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            why = "it exited" if proc.poll() is not None else f"no socket in {timeout:.0f}s"
            stop_pid(proc.pid, "munged")
            raise AdminError(f"munged did not start: {why} (log: {base}/log/munged.log)")
        time.sleep(0.02)
    return proc


def _write_env_file(path: Path, env: dict[str, str]) -> None:
    """burst_buffer.env: KEY=VALUE lines burst_buffer.lua reads for what its environment
    lacks (Slurm 24.11.0 and 24.11.1 start the hooks with none)."""
    path.write_text("".join(f"{k}={v}\n" for k, v in env.items() if "\n" not in v))
    path.chmod(0o644)


def _terminate_session(sid: int) -> None:
    """SIGTERM every process still in session `sid` (a daemon `spawn` started leads its
    own), then SIGKILL what is left after 10 s, as systemd's KillMode=control-group does."""

    def members() -> list[int]:
        pids = []
        for d in Path("/proc").iterdir():
            try:
                fields = (d / "stat").read_bytes().rsplit(b")", 1)[1].split()
            except (OSError, IndexError):
                continue
            if int(fields[3]) == sid and fields[0] != b"Z":
                pids.append(int(d.name))
        return pids

    for sig, wait in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 5.0)):
        for pid in members():
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + wait
        while members() and time.monotonic() < deadline:
            time.sleep(0.05)
        if not members():
            return


def answerer_default() -> bool:
    """Whether the local DAC runs dac-answerer (under burst_buffer/lua; under datawarp where
    lua5.1 runs its forwarder): yes, as a site does (docs/slurm.md, The answerer), unless
    DAC_LOCAL_ANSWERER=0 (every hook then forks dacctl: the fallback's own path, kept under
    test)."""
    return os.environ.get("DAC_LOCAL_ANSWERER", "1") != "0"


def lua_bytecode_default() -> bool:
    """Whether the local DAC installs burst_buffer.lua compiled to Lua 5.1 bytecode, as a
    Debian site does with `dacctl slurm-files --lua-bytecode lua5.1` (docs/slurm.md): where
    lua5.1 is found (every release here links Debian's Lua 5.1.5, one bytecode format),
    unless DAC_LOCAL_LUA_BYTECODE=0 (the source itself, as sites without the option run it)."""
    return os.environ.get("DAC_LOCAL_LUA_BYTECODE", "1") != "0" and bool(shutil.which("lua5.1"))


def _has_lua51(rel: releases.Release) -> bool:
    """Whether `rel`'s slurmctld can run lua5.1: under burst_buffer/datawarp the forwarder to
    the answerer needs it, else GetSysState is dacctl. A chroot release always can: lua5.1 is
    in releases.PACKAGES, added to a cached chroot by `ensure_chroot` before slurmctld starts."""
    return not rel.host or Path("/usr/bin/lua5.1").exists()  # the forwarder's #! line


def _listens(path: Path) -> bool:
    """Whether the answerer on `path` answers and its mirror of etcd is current (the first
    hooks are then answered from memory, not refused while it lists etcd)."""
    from dacservice.answerer import ask

    try:
        return bool(json.loads(ask(str(path), "stats", [], timeout=1.0)[2])["fresh"])
    except (OSError, ValueError, IndexError, KeyError):
        return False


def _node_root(path: str) -> None:
    """A node's root, seen by its jobs at the mount root: passable, never listable (it shows
    every buffer of every job on the node; docs/security.md)."""
    os.makedirs(path, exist_ok=True)
    os.chmod(path, 0o711)


def _marker(name: str) -> str:
    """What the command line of process `name` contains: slurmd-node1 -> slurmd."""
    return name.split("-")[0]


class SlurmCluster:
    """`start()` returns once every node is idle; `stop()` stops what start started."""

    def __init__(
        self,
        workdir: Path,
        nodes: int = 2,
        plugin: str = "lua",
        dac_config: str = "",
        pids: dict[str, int] | None = None,
        mount_root: str = "",
        node_roots: str = "",
        release: str = releases.HOST_RELEASE,
        answerer: bool | None = None,
    ):
        if plugin not in PLUGINS:
            raise AdminError(f"unknown burst buffer plugin '{plugin}' (choose lua or datawarp)")
        self.release = releases.release(release)
        self.base = Path(workdir).resolve() / "slurm"
        self.nodes, self.plugin, self.dac_config = nodes, plugin, dac_config
        self.pids: dict[str, int] = pids or {}
        self.procs: dict[
            str, subprocess.Popen[bytes]
        ] = {}  # what this start spawned, so a daemon that dies says how
        self.mount_root, self.node_roots = mount_root, node_roots
        if answerer is None:
            answerer = answerer_default()
        # burst_buffer/datawarp forks GetSysState and GetSysStatus itself: there the answerer
        # is asked by slurm-plugin/dw_wlm_cli.lua and dwstat.lua, which need lua5.1 where
        # slurmctld runs
        self.answerer = answerer and (plugin == "lua" or _has_lua51(self.release))

    @property
    def answerer_socket(self) -> Path:
        """dac-answerer's socket: under the workdir, which a chroot's slurmctld sees at the same
        path; its directory SlurmUser's own (the answerer keeps it 0700)."""
        return self.base / "answerer" / "socket"

    @property
    def conf(self) -> Path:
        return self.base / "etc" / "slurm.conf"

    @property
    def node_names(self) -> list[str]:
        return [f"node{i}" for i in range(1, self.nodes + 1)]

    @property
    def bindir(self) -> Path | None:
        """Where the release's client commands are wrapped; None: the host's own are used."""
        return None if self.release.host else self.base / "bin"

    def client(self, name: str) -> str:
        """The release's `name` (scontrol, sbatch, ...), as a path or a name on PATH."""
        return str(self.bindir / name) if self.bindir else name

    def env(self) -> dict[str, str]:
        """What a shell needs to talk to this Slurm."""
        return {"SLURM_CONF": str(self.conf)}

    def start(
        self, timeout: float = 30.0, on_started: OnStarted | None = None, munged: bool = True
    ) -> SlurmCluster:
        """Start munged (unless `munged` is False: the caller started it, `start_munged`),
        slurmctld and the slurmd; `on_started(name, pid)` records each pid as soon as it
        exists, so a failure part-way can still be cleaned up."""
        ensure_submit_user()
        rel = self.release
        if not rel.host:
            check_chroot_reachable(rel)
            releases.ensure_chroot(rel)
        for sub in ("etc", "state", "run", "log"):
            (self.base / sub).mkdir(parents=True, exist_ok=True)
        for node in self.node_names:
            (self.base / "spool" / node).mkdir(parents=True, exist_ok=True)
        self._write_configs()
        self._own_for_slurm_user()
        if self.bindir:
            releases.write_client_wrappers(rel, self.bindir)

        def started(name: str, proc: subprocess.Popen[bytes]) -> None:
            self.pids[name] = proc.pid
            self.procs[name] = proc
            if on_started:
                on_started(name, proc.pid)

        if munged:
            started("munged", start_munged(self.base.parent, timeout, rel))
        env = self._daemon_env()
        if self.answerer:  # before slurmctld: its first pools call is answered warm
            started("answerer", self._spawn_answerer(timeout))
        started("slurmctld", self._spawn_slurmctld(clean=True))
        self._wait(lambda: self._scontrol("ping").find("is UP") >= 0, timeout, "slurmctld")
        for node in self.node_names:
            started(
                f"slurmd-{node}",
                spawn(self._slurmd_argv(node), self.base / "log" / f"slurmd-{node}.out", env),
            )
        self._wait(self._nodes_idle, timeout, "slurmd")
        return self

    def restart_slurmctld(
        self, timeout: float = 30.0, on_started: OnRestarted | None = None
    ) -> int:
        """slurmctld again after it died (killed, crashed), on its saved state, as
        `systemctl start slurmctld` would: what is left of the old one's session (its
        slurmscriptd, hooks still running) gets SIGTERM first, as systemd stops what is left
        of a unit's control group once its main process is gone; then `slurmctld -D` without
        `-c`, so Slurm recovers its jobs and burst buffers. Returns once `scontrol ping`
        answers UP; its pid is in `pids`, and given to `on_started(pid)` as soon as it
        exists."""
        old = self.pids.get("slurmctld")
        if old and is_running(old, "slurmctld"):
            stop_pid(old, "slurmctld")
        if old:
            _terminate_session(old)
        proc = self._spawn_slurmctld(clean=False)
        self.pids["slurmctld"], self.procs["slurmctld"] = proc.pid, proc
        if on_started:
            on_started(proc.pid)
        self._wait(lambda: self._scontrol("ping").find("is UP") >= 0, timeout, "slurmctld")
        return proc.pid

    def restart_answerer(self, timeout: float = 30.0, on_started: OnRestarted | None = None) -> int:
        """dac-answerer again (after it was killed, say), as systemd's Restart= would: the old
        one stopped if it still runs, a new one listening before this returns; its pid in
        `pids`, and given to `on_started(pid)` as soon as it exists."""
        old = self.pids.get("answerer")
        if old and is_running(old, "answerer"):
            stop_pid(old, "answerer")
        proc = self._spawn_answerer(timeout)
        self.pids["answerer"], self.procs["answerer"] = proc.pid, proc
        if on_started:
            on_started(proc.pid)
        return proc.pid

    def _spawn_answerer(self, timeout: float) -> subprocess.Popen[bytes]:
        """dac-answerer as SlurmUser, where slurmctld runs (a chroot release's: in its chroot,
        as its hooks' dacctl runs), on `answerer_socket`; returns once the socket answers."""
        rel, sock = self.release, self.answerer_socket
        pw = pwd.getpwnam(rel.slurm_user)
        sock.parent.mkdir(mode=0o700, exist_ok=True)
        os.chown(sock.parent, pw.pw_uid, pw.pw_gid)
        sock.unlink(missing_ok=True)
        argv = [str(Path(sys.executable).parent / "dac-answerer"), "--socket", str(sock)]
        if not rel.host:
            argv = releases.daemon_argv(rel, self.base.parent, argv, rel.slurm_user)
        proc = spawn(argv, self.base / "log" / "answerer.log", self._daemon_env())
        deadline = time.monotonic() + timeout
        while not _listens(sock):
            if proc.poll() is not None or time.monotonic() > deadline:
                why = (
                    self._how_ended_proc(proc)
                    if proc.poll() is not None
                    else f"not answering with etcd's current state in {timeout:.0f}s"
                )
                stop_pid(proc.pid, "answerer")
                raise AdminError(
                    f"dac-answerer did not start: {why} (log: {self.base}/log/answerer.log)"
                )
            time.sleep(0.02)
        return proc

    def _daemon_env(self) -> dict[str, str]:
        env = child_env(**self.hook_env())
        if not self.release.host:  # the chroot's own commands (scontrol in a hook: no skew)
            env["PATH"] = "/usr/sbin:/usr/bin:/sbin:/bin"
        return env

    def _spawn_slurmctld(self, clean: bool) -> subprocess.Popen[bytes]:
        """slurmctld in the foreground; `clean` (-c): on no saved state, as `up` wants."""
        rel = self.release
        ctld = [_binary("slurmctld", rel), "-D", *(["-c"] if clean else [])]
        if not rel.host:
            ctld = releases.daemon_argv(rel, self.base.parent, ctld, rel.slurm_user)
        return spawn(ctld, self.base / "log" / "slurmctld.out", self._daemon_env())

    def hook_env(self) -> dict[str, str]:
        """What burst_buffer.lua's hooks need to find dac: given to slurmctld, and written
        beside burst_buffer.lua for releases that strip it (24.11.0 and 24.11.1)."""
        bin_ = Path(sys.executable).parent
        return {
            "DAC_CONFIG": self.dac_config,
            "SLURM_CONF": str(self.conf),
            "DACCTL": str(bin_ / "dacctl"),
            "DAC_BBSTAT": str(bin_ / "dac-bbstat"),
            "DAC_SLURM_LOG": str(self.base / "log" / "dacctl.log"),
            # "none": every hook forks dacctl (DAC_LOCAL_ANSWERER=0)
            "DAC_ANSWERER_SOCKET": str(self.answerer_socket) if self.answerer else "none",
            # set, as docs/slurm.md advises: a setting the environment lacks is looked up in
            # burst_buffer.env on every call
            "DAC_ANSWERER_TIMEOUT": "0.5",
        }

    def _slurmd_argv(self, node: str) -> list[str]:
        argv = [_binary("slurmd", self.release), "-D", "-N", node]
        view = None
        if self.mount_root:
            view = (os.path.join(self.node_roots, node), self.mount_root)
            _node_root(view[0])
        if not self.release.host:
            return releases.daemon_argv(self.release, self.base.parent, argv, node_view=view)
        return self._in_node_view(node) + argv

    def _own_for_slurm_user(self) -> None:
        """SlurmUser (root, or Debian 13's slurm) owns slurmctld's state, log and pid file, and
        the hooks' log; everything else stays root's."""
        pw = pwd.getpwnam(self.release.slurm_user)
        if pw.pw_uid != 0:
            os.chown(self.base / "state", pw.pw_uid, pw.pw_gid)
        # logs 0600 (the hooks' log is made by a shell redirection, 0644 under a usual
        # umask): they name other users' paths, buffers and errors; the directory passable only
        os.chmod(self.base / "log", 0o711)
        for f in ("log/slurmctld.log", "log/dacctl.log", "run/slurmctld.pid"):
            path = self.base / f
            path.touch(mode=0o600, exist_ok=True)
            os.chown(path, pw.pw_uid, pw.pw_gid)
            if f.startswith("log/"):
                os.chmod(path, 0o600)

    def _in_node_view(self, node: str) -> list[str]:
        """The prefix that starts a node's slurmd (and so its jobs) in a mount namespace of its
        own, where <node_roots>/<node> is seen at mount_root. Slave propagation lets dacd's
        later bind mounts under the node's root reach its jobs, and nothing of theirs leak
        back. The node names are ours; the shell only sees them as positional arguments."""
        if not self.mount_root:
            return []
        root = os.path.join(self.node_roots, node)
        _node_root(root)
        return [
            "unshare",
            "--mount",
            "--propagation",
            "slave",
            "--",
            "sh",
            "-c",
            'mount --bind "$1" "$2" && shift 2 && exec "$@"',
            "sh",
            root,
            self.mount_root,
        ]

    def _write_configs(self) -> None:
        nodes = "\n".join(
            f"NodeName={n} NodeHostname=localhost NodeAddr=127.0.0.1 Port={free_port()} "
            f"CPUs={os.cpu_count() or 1} RealMemory=1000 State=UNKNOWN"
            for n in self.node_names
        )
        rel = self.release
        plugin_dir = "" if rel.host else f"PluginDir={releases.plugin_dir(rel)}\n"
        self.conf.write_text(
            _SLURM_CONF.format(
                base=self.base,
                ctld_port=free_port(),
                plugin=self.plugin,
                nodes=nodes,
                slurm_user=rel.slurm_user,
                plugin_dir=plugin_dir,
            )
        )
        if rel.at_least_24_05:
            (self.base / "etc" / "cgroup.conf").write_text(_CGROUP_CONF)
        else:  # 22.05 knows no `disabled` plugin: a newer release's, left by `down`, must go
            (self.base / "etc" / "cgroup.conf").unlink(missing_ok=True)
        bb = self.base / "etc" / "burst_buffer.conf"
        if self.plugin == "lua":
            bb.write_text(_BB_LUA)
            script = self.base / "etc" / LUA_SCRIPT
            data = asset("slurm", LUA_SCRIPT).read_bytes()
            if lua_bytecode_default():  # the workdir: at the same path in a chroot's slurmctld
                data = lua_bytecode_of(data, f"@{script}", "lua5.1")
            script.write_bytes(data)
            _write_env_file(self.base / "etc" / "burst_buffer.env", self.hook_env())
        else:
            bin_ = Path(sys.executable).parent
            sys_state, sys_status = bin_ / "dacctl", bin_ / "dac-bbstat"
            if self.answerer:  # the forwarders ask it, and run dacctl or dac-bbstat for the rest
                sys_state = self.base / "etc" / "dw_wlm_cli"
                sys_status = self.base / "etc" / "dwstat"
                for lua, path in (("dw_wlm_cli.lua", sys_state), ("dwstat.lua", sys_status)):
                    shutil.copy(asset("slurm", lua), path)
                    path.chmod(0o755)
            bb.write_text(_BB_DATAWARP.format(dacctl=sys_state, bbstat=sys_status))

    def _scontrol(self, *args: str) -> str:
        """scontrol's answer; "" when it hangs (slurmctld not answering yet, or a name it
        cannot resolve), which the waits treat as not ready."""
        try:
            r = subprocess.run(
                [self.client("scontrol"), *args],
                capture_output=True,
                text=True,
                env=child_env(SLURM_CONF=str(self.conf)),
                timeout=10,
            )
        except subprocess.TimeoutExpired:
            return ""
        return r.stdout + r.stderr

    def _nodes_idle(self) -> bool:
        out = self._scontrol("show", "nodes")
        return out.count("State=IDLE") >= self.nodes

    def _wait(self, ready: Callable[[], bool], timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not ready():
            dead = [n for n, pid in self.pids.items() if not is_running(pid, _marker(n))]
            if dead or time.monotonic() > deadline:
                why = (
                    ", ".join(f"{n} {self._how_ended(n)}" for n in dead)
                    if dead
                    else f"{what} not ready in {timeout:.0f}s"
                )
                raise AdminError(f"Slurm did not start: {why} (logs: {self.base}/log)")
            time.sleep(0.05)

    def _how_ended(self, name: str) -> str:
        """`exited (status 1)`, `killed by SIGTERM`: a daemon that dies before it logs
        anything leaves only this to go on."""
        return self._how_ended_proc(self.procs.get(name))

    @staticmethod
    def _how_ended_proc(proc: subprocess.Popen[bytes] | None) -> str:
        rc = proc.poll() if proc else None
        if rc is None:
            return "exited"
        if rc < 0:
            try:
                return f"killed by {signal.Signals(-rc).name}"
            except ValueError:  # a real-time signal has no name
                return f"killed by signal {-rc}"
        return f"exited (status {rc})"

    def stop(self) -> list[str]:
        stopped = []
        order = [n for n in self.pids if n.startswith("slurmd")] + [
            "slurmctld",
            "answerer",
            "munged",
        ]
        for name in order:
            pid = self.pids.get(name)
            if pid and is_running(pid, _marker(name)):
                stop_pid(pid, _marker(name))
                stopped.append(f"{name} (pid {pid})")
        return stopped
