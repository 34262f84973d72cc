"""A real Slurm 22.05 on one machine for the local DAC: munged on a private socket, slurmctld,
and one slurmd per fake node (Debian's build allows several slurmd on one host), all on free
loopback ports, wired to dac through burst_buffer/lua (daccore/share/slurm/burst_buffer.lua) or
burst_buffer/datawarp (dacctl as its dw_wlm_cli).

Everything lives under `<workdir>/slurm/`; processes run in the foreground of their own
sessions so their pids are ours to stop. Facts this relies on are in ../shared/notes/slurm.md.
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from daccore.errors import AdminError
from daccore.share import asset
from daclocal.procs import child_env, free_port, is_running, spawn, stop_pid

__all__ = ["SlurmCluster", "SUBMIT_USER", "PLUGINS", "start_munged", "munge_socket"]

#: Slurm refuses burst buffers to root's jobs; demo and tests submit as this user.
SUBMIT_USER = "dacuser"
PLUGINS = ("lua", "datawarp")

_SLURM_CONF = """\
ClusterName=daclocal
SlurmctldHost=localhost
SlurmctldPort={ctld_port}
SlurmUser=root
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
BurstBufferType=burst_buffer/{plugin}
{nodes}
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
"""

# Directive=DW: burst_buffer/lua then hands DataWarp's #DW lines to the hooks unchanged.
_BB_LUA = """\
Directive=DW
StageInTimeout=60
StageOutTimeout=60
OtherTimeout=60
"""

_BB_DATAWARP = """\
GetSysState={dacctl}
GetSysStatus={bbstat}
DefaultPool=default
Flags=EmulateCray,EnablePersistent
StageInTimeout=60
StageOutTimeout=60
OtherTimeout=60
ValidateTimeout=10
"""


def _binary(name: str) -> str:
    path = shutil.which(name) or shutil.which(name, path="/usr/sbin:/usr/bin")
    if not path:
        raise AdminError(f"{name} is not installed: run `make deps` (installs Debian's slurmctld, "
                         "slurmd, slurm-client and munge)")
    return path


def ensure_submit_user() -> pwd.struct_passwd:
    try:
        return pwd.getpwnam(SUBMIT_USER)
    except KeyError:
        r = subprocess.run(["useradd", "--create-home", "--shell", "/bin/bash", SUBMIT_USER],
                           capture_output=True, text=True)
        if r.returncode != 0:
            raise AdminError(f"cannot create the submit user {SUBMIT_USER}: "
                             f"{r.stderr.strip()}") from None
        return pwd.getpwnam(SUBMIT_USER)


def munge_socket(workdir: Path) -> Path:
    """The local DAC's one munged socket: Slurm's (AuthInfo) and dac's user service's."""
    return Path(workdir).resolve() / "slurm" / "munge" / "munge.socket"


def start_munged(workdir: Path, timeout: float = 30.0) -> subprocess.Popen:
    """Start the local DAC's munged, with a key of its own, on `munge_socket(workdir)`; returns
    once the socket answers. Every user may use it, as on a Slurm node."""
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
    proc = spawn([_binary("munged"), "--foreground", "--force", f"--socket={m}/munge.socket",
                  f"--key-file={key}", f"--pid-file={base}/run/munged.pid",
                  f"--log-file={base}/log/munged.log", f"--seed-file={m}/munged.seed"],
                 base / "log" / "munged.out")
    deadline = time.monotonic() + timeout
    while not (m / "munge.socket").exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            why = "it exited" if proc.poll() is not None else f"no socket in {timeout:.0f}s"
            stop_pid(proc.pid, "munged")
            raise AdminError(f"munged did not start: {why} (log: {base}/log/munged.log)")
        time.sleep(0.02)
    return proc


def _marker(name: str) -> str:
    """What the command line of process `name` contains: slurmd-node1 -> slurmd."""
    return name.split("-")[0]


class SlurmCluster:
    """`start()` returns once every node is idle; `stop()` stops what start started."""

    def __init__(self, workdir: Path, nodes: int = 2, plugin: str = "lua",
                 dac_config: str = "", pids: dict | None = None, mount_root: str = "",
                 node_roots: str = ""):
        if plugin not in PLUGINS:
            raise AdminError(f"unknown burst buffer plugin '{plugin}' (choose lua or datawarp)")
        self.base = Path(workdir).resolve() / "slurm"
        self.nodes, self.plugin, self.dac_config = nodes, plugin, dac_config
        self.pids: dict = pids or {}
        self.procs: dict = {}  # what this start spawned, so a daemon that dies says how
        self.mount_root, self.node_roots = mount_root, node_roots

    @property
    def conf(self) -> Path:
        return self.base / "etc" / "slurm.conf"

    @property
    def node_names(self) -> list[str]:
        return [f"node{i}" for i in range(1, self.nodes + 1)]

    def env(self) -> dict[str, str]:
        """What a shell needs to talk to this Slurm."""
        return {"SLURM_CONF": str(self.conf)}

    def start(self, timeout: float = 30.0, on_started=None, munged: bool = True) -> SlurmCluster:
        """Start munged (unless `munged` is False: the caller started it, `start_munged`),
        slurmctld and the slurmd; `on_started(name, pid)` records each pid as soon as it
        exists, so a failure part-way can still be cleaned up."""
        ensure_submit_user()
        for sub in ("etc", "state", "run", "log"):
            (self.base / sub).mkdir(parents=True, exist_ok=True)
        for node in self.node_names:
            (self.base / "spool" / node).mkdir(parents=True, exist_ok=True)
        self._write_configs()

        def started(name: str, proc) -> None:
            self.pids[name] = proc.pid
            self.procs[name] = proc
            if on_started:
                on_started(name, proc.pid)
        if munged:
            started("munged", start_munged(self.base.parent, timeout))
        env = child_env(DAC_CONFIG=self.dac_config, SLURM_CONF=str(self.conf),
                        DACCTL=str(Path(sys.executable).parent / "dacctl"),
                        DAC_BBSTAT=str(Path(sys.executable).parent / "dac-bbstat"),
                        DAC_SLURM_LOG=str(self.base / "log" / "dacctl.log"))
        started("slurmctld", spawn([_binary("slurmctld"), "-D", "-c"],
                                   self.base / "log" / "slurmctld.out", env))
        self._wait(lambda: self._scontrol("ping").find("is UP") >= 0, timeout, "slurmctld")
        for node in self.node_names:
            started(f"slurmd-{node}", spawn(self._in_node_view(node) +
                                            [_binary("slurmd"), "-D", "-N", node],
                                            self.base / "log" / f"slurmd-{node}.out", env))
        self._wait(self._nodes_idle, timeout, "slurmd")
        return self

    def _in_node_view(self, node: str) -> list[str]:
        """The prefix that starts a node's slurmd (and so its jobs) in a mount namespace of its
        own, where <node_roots>/<node> is seen at mount_root. Slave propagation lets dacd's
        later bind mounts under the node's root reach its jobs, and nothing of theirs leak
        back. The node names are ours; the shell only sees them as positional arguments."""
        if not self.mount_root:
            return []
        root = os.path.join(self.node_roots, node)
        os.makedirs(root, exist_ok=True)
        return ["unshare", "--mount", "--propagation", "slave", "--", "sh", "-c",
                'mount --bind "$1" "$2" && shift 2 && exec "$@"', "sh", root, self.mount_root]

    def _write_configs(self) -> None:
        nodes = "\n".join(
            f"NodeName={n} NodeHostname=localhost NodeAddr=127.0.0.1 Port={free_port()} "
            f"CPUs={os.cpu_count() or 1} RealMemory=1000 State=UNKNOWN" for n in self.node_names)
        self.conf.write_text(_SLURM_CONF.format(base=self.base, ctld_port=free_port(),
                                                plugin=self.plugin, nodes=nodes))
        bb = self.base / "etc" / "burst_buffer.conf"
        if self.plugin == "lua":
            bb.write_text(_BB_LUA)
            shutil.copy(asset("slurm", "burst_buffer.lua"), self.base / "etc" / "burst_buffer.lua")
        else:
            bin_ = Path(sys.executable).parent
            bb.write_text(_BB_DATAWARP.format(dacctl=bin_ / "dacctl", bbstat=bin_ / "dac-bbstat"))

    def _scontrol(self, *args: str) -> str:
        """scontrol's answer; "" when it hangs (slurmctld not answering yet, or a name it
        cannot resolve), which the waits treat as not ready."""
        try:
            r = subprocess.run(["scontrol", *args], capture_output=True, text=True,
                               env=child_env(SLURM_CONF=str(self.conf)), timeout=10)
        except subprocess.TimeoutExpired:
            return ""
        return r.stdout + r.stderr

    def _nodes_idle(self) -> bool:
        out = self._scontrol("show", "nodes")
        return out.count("State=IDLE") >= self.nodes

    def _wait(self, ready, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not ready():
            dead = [n for n, pid in self.pids.items() if not is_running(pid, _marker(n))]
            if dead or time.monotonic() > deadline:
                why = (", ".join(f"{n} {self._how_ended(n)}" for n in dead) if dead
                       else f"{what} not ready in {timeout:.0f}s")
                raise AdminError(f"Slurm did not start: {why} (logs: {self.base}/log)")
            time.sleep(0.05)

    def _how_ended(self, name: str) -> str:
        """`exited (status 1)`, `killed by SIGTERM`: a daemon that dies before it logs
        anything leaves only this to go on."""
        proc = self.procs.get(name)
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
        order = [n for n in self.pids if n.startswith("slurmd")] + ["slurmctld", "munged"]
        for name in order:
            pid = self.pids.get(name)
            if pid and is_running(pid, _marker(name)):
                stop_pid(pid, _marker(name))
                stopped.append(f"{name} (pid {pid})")
        return stopped
