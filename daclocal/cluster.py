"""`dacctl local up|env|status|down`: one machine posing as a whole DAC.

Everything `up` starts is written to `<workdir>/state.json` as soon as it exists, so `down` (or
a failed `up` cleaning after itself) stops exactly that and nothing else: processes are matched
by pid *and* command line, loop devices by their backing file.

All of it runs as root on what state.json says, so the workdir, every directory above it and
state.json must be root's alone (`_trusted_workdir`): a state file a user wrote would otherwise
name the pids root kills and the files root deletes.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import stat
import subprocess
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, NotRequired, TypedDict

import yaml

from daccore.errors import AdminError, DacError
from daccore.rules.inventory import summarize
from daccore.settings.config import load_config
from daccore.store import Store
from daclocal import loopdev, releases, userbin
from daclocal.etcd_server import EtcdCluster, EtcdServer
from daclocal.procs import child_env, free_port, is_running, python_module, spawn, stop_pid
from daclocal.slurm import SlurmCluster, check_chroot_reachable, munge_socket, start_munged

__all__ = [
    "LocalState",
    "up",
    "down",
    "status",
    "env_lines",
    "restart_slurmctld",
    "restart_answerer",
    "POOL",
]

POOL = "default"
#: where jobs see buffers on every fake node, and where each node's own view lives
MOUNT_ROOT = "mnt"
NODE_ROOTS = "nodes"
#: the user service's module, run as `python -I -m`, and what its command line is known by
USER_SERVICE = "dacservice.users"


# state.json's sections. Keys are optional where a state from an older `up` (or one cut short)
# lacks them: readers use .get() there.
class EtcdProcess(TypedDict, total=False):
    """One etcd member: name, pid, client_port, peer_port."""

    name: str
    pid: int
    client_port: int
    peer_port: int


class EtcdState(EtcdProcess, total=False):
    """pid, client_port, peer_port (the first member's; no name), release, members (one, or
    --etcd-members of them; a state from before members has none)."""

    release: str
    members: list[EtcdProcess]


class BrickState(TypedDict):
    host: str
    file: str
    device: str


class DacdState(TypedDict):
    host: str
    pid: int
    metrics: NotRequired[str]  # host:port


class SlurmState(TypedDict, total=False):
    nodes: int
    plugin: str
    release: str
    pids: dict[str, int]  # process name -> pid
    answerer: bool


class UsersState(TypedDict, total=False):
    """The user service: its address, munged's and the service's pids, and users' dacctl (or
    the line saying why they have none)."""

    address: str
    dacctl: str
    munged: int
    service: int


@dataclass
class LocalState:
    workdir: str
    etcd: EtcdState = field(default_factory=EtcdState)
    bricks: list[BrickState] = field(default_factory=list)
    dacd: list[DacdState] = field(default_factory=list)
    slurm: SlurmState = field(default_factory=SlurmState)
    users: UsersState = field(default_factory=UsersState)

    @property
    def config_path(self) -> Path:
        return Path(self.workdir) / "dac.yaml"

    @property
    def endpoint(self) -> str:
        return f"https://127.0.0.1:{self.etcd['client_port']}"

    @property
    def endpoints(self) -> list[str]:
        """Every etcd member's client URL (a state from before members: the one)."""
        members = self.etcd.get("members") or [self.etcd]
        return [f"https://127.0.0.1:{m['client_port']}" for m in members]

    def save(self) -> None:
        path = Path(self.workdir) / "state.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(self), indent=2))
        tmp.chmod(0o644)  # whatever the umask: load refuses a state file others can write
        tmp.replace(path)

    @classmethod
    def load(cls, workdir: Path) -> LocalState | None:
        """The state `up` wrote, from a workdir and file only root can change; the workdir
        it records is this one, whatever the file says."""
        _trusted_workdir(workdir)
        try:
            fd = os.open(workdir / "state.json", os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except FileNotFoundError:
            return None
        except OSError as e:
            raise AdminError(f"{workdir}/state.json: {e.strerror}; refused") from None
        with os.fdopen(fd, "rb") as f:
            st = os.fstat(f.fileno())
            if not stat.S_ISREG(st.st_mode) or st.st_uid != 0 or st.st_mode & 0o022:
                raise AdminError(
                    f"{workdir}/state.json is not root's alone (owner uid "
                    f"{st.st_uid}, mode {st.st_mode & 0o777:04o}); refused: "
                    "the local DAC acts as root on what it says"
                )
            try:
                data = json.loads(f.read(1 << 20))
                return cls(**{**data, "workdir": str(workdir)})
            except (ValueError, TypeError) as e:  # not JSON, not UTF-8, not a state's fields
                raise AdminError(
                    f"{workdir}/state.json is not a state `dacctl local up` wrote "
                    f"({type(e).__name__}: {e}); refused: stop what it started by "
                    "hand, then remove it"
                ) from None


def _trusted_workdir(workdir: Path) -> None:
    """The workdir and every directory above it belong to root and no one else can write to
    them (a sticky one, such as /tmp, only above the workdir); no link on the way."""
    for d in [workdir, *workdir.parents]:
        try:
            st = os.lstat(d)
        except FileNotFoundError:
            continue  # `up` makes it, root-owned
        writable = st.st_mode & 0o022 and (d == workdir or not st.st_mode & stat.S_ISVTX)
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != 0 or writable:
            raise AdminError(
                f"{d} is not a directory of root's alone (owner uid {st.st_uid}, "
                f"mode {st.st_mode & 0o7777:04o}); refused: use a --workdir "
                "only root can change"
            )


def up(
    workdir: Path,
    servers: int = 2,
    bricks_per_server: int = 4,
    brick_size: int = 1 << 30,
    timeout: float = 30.0,
    slurm_nodes: int = 0,
    slurm_plugin: str = "lua",
    slurm_release: str = releases.HOST_RELEASE,
    etcd_release: str = "3.4",
    etcd_members: int = 1,
) -> LocalState:
    """Start etcd, make the loop-file bricks, start one dacd per server and, with
    `slurm_nodes`, a Slurm (`slurm_release`: the host's own, or one from a cached Debian
    chroot) of that many nodes wired to dac; return when every server shows in the pools and
    every node is idle. `etcd_release`: 3.4 (the host's), 3.5 or 3.6 (daclocal.etcd_releases);
    `etcd_members`: 1, or an odd number of members on loopback (one cluster, failover).
    On any failure, stop what was started and re-raise."""
    workdir = workdir.resolve()
    if servers < 1 or bricks_per_server < 1:
        raise AdminError("the local DAC needs at least one server with one brick")
    if etcd_members < 1 or etcd_members % 2 == 0:
        raise AdminError(
            f"--etcd-members {etcd_members}: give an odd number (1, 3, 5): an "
            "even one tolerates no more failures than the odd one below it"
        )
    rel = releases.release(slurm_release)
    if slurm_nodes and not rel.host:
        check_chroot_reachable(rel)
        releases.ensure_chroot(rel)  # before anything starts: a failed build leaves nothing
    from daclocal.etcd_releases import etcd_binary

    etcd_bin = etcd_binary(etcd_release)
    _reachable_by_jobs(workdir)
    existing = LocalState.load(workdir)
    if existing is not None:
        raise AdminError(
            f"a local DAC already runs in {workdir}: run "
            f"`dacctl local down --workdir {workdir}` first"
        )
    _lay_out(workdir)
    state = LocalState(str(workdir))
    # SlurmUser (Debian 13's slurm) runs the hooks: it holds the slurm role's credential and
    # the etcd client key, as a site's controller does (docs/security.md)
    slurm_user = rel.slurm_user if slurm_nodes else "root"
    owners = None
    if slurm_user != "root":
        import pwd

        pw = pwd.getpwnam(slurm_user)
        owners = {"slurm": (pw.pw_uid, pw.pw_gid)}
    try:
        etcd: EtcdServer | EtcdCluster
        if etcd_members == 1:
            etcd = EtcdServer(workdir / "etcd", owners=owners, binary=etcd_bin)
            members = [etcd]
        else:
            etcd = EtcdCluster(workdir / "etcd", etcd_members, owners=owners, binary=etcd_bin)
            members = etcd.members
        try:
            etcd.start()
        finally:  # started or not, down must find every member that ran
            state.etcd = {
                "pid": members[0].pid,
                "client_port": members[0].client_port,
                "peer_port": members[0].peer_port,
                "release": etcd_release,
                "members": [
                    {
                        "name": m.name,
                        "pid": m.pid,
                        "client_port": m.client_port,
                        "peer_port": m.peer_port,
                    }
                    for m in members
                ],
            }
            state.save()
        if owners:
            os.chown(etcd.pki_dir / "client.key", *owners["slurm"])
        hosts = {}
        for s in range(1, servers + 1):
            host = f"dac-server-{s}"
            bricks = []
            for b in range(bricks_per_server):
                path = workdir / "bricks" / f"{host}-brick{b}.img"
                device = loopdev.attach(path, brick_size)
                state.bricks.append({"host": host, "file": str(path), "device": device})
                state.save()
                # Alternate two PCIe switches so placement's topology spreading is exercised.
                bricks.append(
                    {
                        "device": device,
                        "capacity": brick_size,
                        "pool": POOL,
                        "name": f"brick{b}",
                        "pcie_switch": str(b % 2),
                    }
                )
            fs_root = workdir / "fs" / host
            fs_root.mkdir(exist_ok=True)
            fs_root.chmod(0o711)
            hosts[host] = {"bricks": bricks, "fs_root": str(fs_root)}
        node_views(workdir)
        # TLS with client certificates and RBAC, as a site's etcd must be (docs/security.md)
        config: dict[str, Any] = {
            "etcd": {**etcd.settings(), "timeout": 5},
            "pools": {POOL: {"granularity": brick_size, "backend": "local", "swap": True}},
            "hosts": hosts,
            "lease_ttl": 5,
            "mount_root": str(workdir / MOUNT_ROOT),
            "node_root": str(workdir / NODE_ROOTS / "{node}"),
            "user_service": f"127.0.0.1:{free_port()}",
            "munge_socket": str(munge_socket(workdir)),
            "slurm_user": slurm_user,
            # Slurm's rules for persistent buffers hold for users' dacctl too
            "burst_buffer_conf": str(workdir / "slurm" / "etc" / "burst_buffer.conf")
            if slurm_nodes
            else "",
        }
        if slurm_nodes:  # the user service asks this Slurm about jobs (in-job stages)
            site = SlurmCluster(workdir, slurm_nodes, release=rel.name)
            config["slurm_conf"] = str(site.conf)
            config["slurm_bin"] = str(site.bindir or "")
        state.config_path.write_text(yaml.safe_dump(config, sort_keys=False))
        for host in hosts:  # one config for all; each dacd serves /metrics on its own port
            metrics = f"127.0.0.1:{free_port()}"
            proc = spawn(
                python_module(
                    "dacd.main",
                    "--config",
                    str(state.config_path),
                    "--host",
                    host,
                    "--metrics-address",
                    metrics,
                ),
                workdir / "logs" / f"dacd-{host}.log",
                child_env(DAC_CONFIG=str(state.config_path)),
            )
            state.dacd.append({"host": host, "pid": proc.pid, "metrics": metrics})
            state.save()
        _wait_until_registered(state, servers, timeout)
        _start_user_service(state, config["user_service"], timeout, rel if slurm_nodes else None)
        if slurm_nodes:
            state.slurm = {
                "nodes": slurm_nodes,
                "plugin": slurm_plugin,
                "release": rel.name,
                "pids": {},
            }
            cluster = SlurmCluster(
                workdir,
                slurm_nodes,
                slurm_plugin,
                str(state.config_path),
                mount_root=str(workdir / MOUNT_ROOT),
                node_roots=str(workdir / NODE_ROOTS),
                release=rel.name,
            )
            state.slurm["answerer"] = cluster.answerer  # DAC_LOCAL_ANSWERER, once for `down`

            def record(name: str, pid: int) -> None:
                state.slurm["pids"][name] = pid
                state.save()

            cluster.start(timeout, on_started=record, munged=False)  # ours, started above
        return state
    except BaseException:
        down(workdir)
        raise


def _lay_out(workdir: Path) -> None:
    """The workdir's tree, closed to users where they have no business (docs/security.md):
    bricks and logs root's alone; fs (each server's fs_root) passable but not listable, since
    the copier reaches a buffer's directories there as the job's user; the workdir itself and
    the node roots passable, so jobs reach their buffers under mnt."""
    workdir.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(workdir / "logs", ignore_errors=True)  # down keeps them; a new up starts anew
    for sub, mode in (("bricks", 0o700), ("logs", 0o700), ("fs", 0o711)):
        (workdir / sub).mkdir(exist_ok=True)
        (workdir / sub).chmod(mode)


def _start_user_service(
    state: LocalState, address: str, timeout: float, rel: releases.Release | None = None
) -> None:
    """The local DAC's one munged (Slurm's too: `rel`'s own) and dac's user service, through
    which users' dacctl commands reach etcd; returns once the service listens."""
    workdir = Path(state.workdir)
    # what users run: DIR/bin/dacctl, or the line saying why they cannot (daclocal/userbin.py)
    problem = userbin.write_launcher(workdir)
    state.users = {"address": address, "dacctl": problem or str(userbin.launcher(workdir))}
    state.users["munged"] = start_munged(workdir, timeout, rel).pid
    state.save()
    log = workdir / "logs" / "user-service.log"
    proc = spawn(
        python_module(USER_SERVICE),
        log,
        child_env(DAC_CONFIG=str(state.config_path)),
    )
    state.users["service"] = proc.pid
    state.save()
    host, port = address.rsplit(":", 1)
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            last = (log.read_text(errors="replace").strip().splitlines() or ["no output"])[-1]
            raise AdminError(f"the user service exited: {last} (log: {log})")
        try:
            socket.create_connection((host, int(port)), timeout=1).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise AdminError(
                    f"the user service did not listen on {address} within "
                    f"{timeout:.0f}s (log: {log})"
                ) from None
            time.sleep(0.05)


def _reachable_by_jobs(workdir: Path) -> None:
    """Jobs run as their user and find buffers under <workdir>/mnt: every directory above
    must let other users through."""
    for d in [workdir, *workdir.parents]:
        if d.exists() and not d.stat().st_mode & 0o001:
            raise AdminError(
                f"jobs could not reach their buffers: {d} is not searchable by "
                f"other users (mode {d.stat().st_mode & 0o777:04o}); use a "
                "--workdir under directories they can enter"
            )


def node_views(workdir: Path) -> None:
    """Every fake compute node gets its own root under <workdir>/nodes/<node>, which its slurmd
    sees at <workdir>/mnt (daclocal.slurm): the same job path on every node, and no two nodes
    ever share a mount. nodes/ is a shared mount so dacd's bind mounts propagate into them."""
    roots = workdir / NODE_ROOTS
    (workdir / MOUNT_ROOT).mkdir(parents=True, exist_ok=True)
    roots.mkdir(parents=True, exist_ok=True)
    # passable, never listable: a node's root shows every buffer of every job on that node
    for d in (workdir / MOUNT_ROOT, roots):
        d.chmod(0o711)
    if str(roots) not in _mounts():
        for argv in (
            ["mount", "--bind", str(roots), str(roots)],
            ["mount", "--make-shared", str(roots)],
        ):
            r = subprocess.run(argv, capture_output=True, text=True)
            if r.returncode != 0:
                raise AdminError(f"{' '.join(argv)}: {r.stderr.strip()}")


def _mounts() -> list[str]:
    return [line.split()[1] for line in Path("/proc/mounts").read_text().splitlines()]


def _wait_until_registered(state: LocalState, servers: int, timeout: float) -> None:
    store = _store(state)
    deadline = time.monotonic() + timeout
    while True:
        for d in state.dacd:
            if not is_running(d["pid"], state.workdir):
                log = Path(state.workdir) / "logs" / f"dacd-{d['host']}.log"
                last = (log.read_text(errors="replace").strip().splitlines() or ["no output"])[-1]
                raise AdminError(f"dacd for {d['host']} exited: {last} (log: {log})")
        pools = {p.name: p for p in summarize(store.summary_inventory())}
        if POOL in pools and pools[POOL].hosts_up == servers:
            return
        if time.monotonic() > deadline:
            raise AdminError(
                f"the local DAC's {servers} servers did not register within "
                f"{timeout:.0f}s (logs: {state.workdir}/logs)"
            )
        time.sleep(0.05)


def down(workdir: Path) -> list[str]:
    """Stop everything `up` started in `workdir`; returns what was stopped, for the user."""
    workdir = workdir.resolve()
    state = LocalState.load(workdir)
    if state is None:
        return []
    done = []
    if state.slurm:
        done += _cluster(state).stop()
    for name, pid, marker in (
        ("user service", state.users.get("service"), USER_SERVICE),
        ("munged", state.users.get("munged"), "munged"),
    ):
        if pid and is_running(pid, marker):
            stop_pid(pid, marker)
            done.append(f"{name} (pid {pid})")
    for d in state.dacd:
        # the command line `up` gave this dacd, so no other process is ever taken for it
        marker = f"dacd.main --config {state.config_path} --host {d['host']} "
        if is_running(d["pid"], marker):
            stop_pid(d["pid"], marker)
            done.append(f"dacd {d['host']} (pid {d['pid']})")
    for m in state.etcd.get("members") or [state.etcd]:
        if m.get("pid"):
            etcd = EtcdServer(workdir / "etcd", pid=m["pid"])
            if etcd.running():
                etcd.stop()
                done.append(f"etcd {m.get('name', '')} (pid {m['pid']})".replace("  ", " "))
    done += _unmount_under(workdir)
    bricks = workdir / "bricks"
    for b in state.bricks:
        name = os.path.basename(b["file"])
        if b["file"] != str(bricks / name) or not _BRICK_FILE.fullmatch(name):
            continue  # not a brick `up` made: never root's to detach or delete
        if loopdev.backing_file(b["device"]) == b["file"]:
            loopdev.detach(b["device"], Path(b["file"]))
            done.append(f"loop device {b['device']}")
        _unlink_beneath(bricks, name)
    for m in state.etcd.get("members", []):
        if re.fullmatch(r"dac-local-[0-9]{1,2}", str(m.get("name"))):
            shutil.rmtree(workdir / "etcd" / f"{m['name']}-data", ignore_errors=True)
    for leftover in (
        workdir / "etcd" / "etcd-data",
        workdir / "etcd" / "credentials",
        workdir / "etcd" / "pki",
        workdir / "bricks",
        workdir / "slurm" / "state",
        workdir / "slurm" / "spool",
        workdir / "slurm" / "munge",
        workdir / "slurm" / "bin",
        workdir / "slurm" / "answerer",
        workdir / "fs",
        workdir / NODE_ROOTS,
        workdir / MOUNT_ROOT,
    ):
        shutil.rmtree(leftover, ignore_errors=True)
    state.config_path.unlink(missing_ok=True)
    (workdir / "state.json").unlink()
    return done


_BRICK_FILE = re.compile(r"dac-server-[0-9]{1,3}-brick[0-9]{1,3}\.img")


def _unlink_beneath(directory: Path, name: str) -> None:
    """Remove `name` from `directory` itself, never through a link."""
    try:
        fd = os.open(directory, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return
    try:
        os.unlink(name, dir_fd=fd)
    except FileNotFoundError:
        pass
    finally:
        os.close(fd)


def _unmount_under(workdir: Path) -> list[str]:
    """Swap files and buffers still active under the workdir (a teardown that never came):
    swap off and unmount them, deepest first, so the loop devices can be detached."""
    inside = str(workdir) + "/"
    swaps = [line.split()[0] for line in Path("/proc/swaps").read_text().splitlines()[1:]]
    for f in (f for f in swaps if f.startswith(inside)):
        subprocess.run(["swapoff", f], capture_output=True)
    mine = sorted((m for m in _mounts() if m.startswith(inside)), key=len, reverse=True)
    for m in mine:
        subprocess.run(["umount", m], capture_output=True)
    return [f"swap {f}" for f in swaps if f.startswith(inside)] + [f"mount {m}" for m in mine]


def _store(state: LocalState) -> Store:
    # http: this process goes on to fork Slurm's daemons, and gRPC's threads make fork unsafe
    return Store.from_settings(load_config(str(state.config_path), env={}).etcd, transport="http")


def env_lines(workdir: Path) -> list[str]:
    state = _require(workdir)
    lines = [
        f"export DAC_CONFIG={state.config_path}",
        f"export DAC_ETCD_ENDPOINTS={','.join(state.endpoints)}",
    ]
    if state.slurm:
        cluster = _cluster(state)
        lines.append(f"export SLURM_CONF={cluster.conf}")
        if cluster.bindir:  # the release's own client commands, first
            lines.append(f"export PATH={cluster.bindir}:$PATH")
    return lines


def _cluster(state: LocalState) -> SlurmCluster:
    s = state.slurm
    workdir = Path(state.workdir)
    return SlurmCluster(
        workdir,
        s["nodes"],
        s["plugin"],
        str(state.config_path),
        pids=s["pids"],
        mount_root=str(workdir / MOUNT_ROOT),
        node_roots=str(workdir / NODE_ROOTS),
        release=s.get("release", releases.HOST_RELEASE),
        answerer=s.get("answerer", False),
    )


def restart_slurmctld(workdir: Path, timeout: float = 30.0) -> int:
    """The local DAC's slurmctld started again on its saved state after it died, as systemd
    would (SlurmCluster.restart_slurmctld); its new pid is recorded for `down`."""
    state = _require(workdir.resolve())
    if not state.slurm:
        raise AdminError(f"the local DAC in {state.workdir} runs no Slurm")

    def record(pid: int) -> None:
        state.slurm["pids"]["slurmctld"] = pid
        state.save()

    return _cluster(state).restart_slurmctld(timeout, on_started=record)


def restart_answerer(workdir: Path, timeout: float = 30.0) -> int:
    """The local DAC's dac-answerer started again (SlurmCluster.restart_answerer); its new pid
    is recorded for `down`."""
    state = _require(workdir.resolve())
    if not state.slurm.get("answerer"):
        raise AdminError(f"the local DAC in {state.workdir} runs no answerer")

    def record(pid: int) -> None:
        state.slurm["pids"]["answerer"] = pid
        state.save()

    return _cluster(state).restart_answerer(timeout, on_started=record)


def status(workdir: Path) -> dict[str, Any]:
    """Which of the local DAC's processes and devices are up, and its pools (`dacctl local
    status` prints it, or dumps it as JSON)."""
    state = _require(workdir)
    report: dict[str, Any] = {
        "workdir": state.workdir,
        "etcd": {
            "endpoint": state.endpoint,
            "pid": state.etcd["pid"],
            "release": state.etcd.get("release", "3.4"),
            "running": is_running(state.etcd["pid"], state.workdir),
            "members": [
                {
                    "name": m.get("name", "dac-local"),
                    "pid": m["pid"],
                    "endpoint": f"https://127.0.0.1:{m['client_port']}",
                    "running": is_running(m["pid"], state.workdir),
                }
                for m in state.etcd.get("members") or [state.etcd]
            ],
        },
        "slurm_release": state.slurm.get("release", releases.HOST_RELEASE) if state.slurm else None,
        "dacd": [
            {
                "host": d["host"],
                "pid": d["pid"],
                "metrics": d.get("metrics"),
                "running": is_running(d["pid"], state.workdir),
            }
            for d in state.dacd
        ],
        "slurm": [
            {"process": name, "pid": pid, "running": is_running(pid, name.split("-")[0])}
            for name, pid in state.slurm.get("pids", {}).items()
        ],
        "users": _user_rows(state),
        # users' own dacctl (DIR/bin/dacctl), or the line saying why they have none
        "users_dacctl": state.users.get("dacctl"),
        "bricks": [
            {
                "host": b["host"],
                "device": b["device"],
                "attached": loopdev.backing_file(b["device"]) == b["file"],
            }
            for b in state.bricks
        ],
    }
    try:
        report["pools"] = [p.as_dict() for p in summarize(_store(state).summary_inventory())]
    except DacError as e:
        report["pools_error"] = str(e)
    return report


def _user_rows(state: LocalState) -> list[dict[str, object]]:
    """munged and the user service: pid, whether it runs, where users reach it."""
    u, sock = state.users, str(munge_socket(Path(state.workdir)))
    rows = (
        [
            {
                "process": "munged",
                "pid": u["munged"],
                "address": sock,
                "running": is_running(u["munged"], "munged"),
            }
        ]
        if u.get("munged")
        else []
    )
    if u.get("service"):
        rows.append(
            {
                "process": "user-service",
                "pid": u["service"],
                "address": u["address"],
                "running": is_running(u["service"], USER_SERVICE),
            }
        )
    return rows


def _require(workdir: Path) -> LocalState:
    state = LocalState.load(workdir.resolve())
    if state is None:
        raise AdminError(
            f"no local DAC in {workdir.resolve()}: start one with "
            f"`dacctl local up --workdir {workdir}`"
        )
    return state
