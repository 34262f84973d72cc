"""A site of several hosts on this one machine (docs/verification.md, "multi-host"; docs/admin.md's
multi-host install): each storage server and compute node is a network, mount and UTS
namespace of its own on a bridge, with its hostname, /etc/hosts, /root/.ansible and an sshd;
the controller (etcd with TLS and RBAC on the bridge address, Slurm's calls) is the test's own
namespace. dacd runs in each server's namespaces with its own config; the Lustre stand-ins
(tests/site/) are on every host's PATH behind a wrapper that tells them the host they run on
from `uname -n`, so a command run on the wrong host is recorded there, whatever the inventory
says.

Every name made here starts with `dacmh` (interfaces, namespaces); `Site.destroy` removes all
of it, also after a failure half way.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

import yaml
from clitools import pools, wait_for
from recorded_site import SITE_BIN, RecordedSite
from sshd import Sshd, keygen

from daccore.settings.config import load_config
from daccore.store import Store
from daclocal.etcd_server import EtcdServer

#: tools the playbooks call, stood in for on every host
TOOLS = sorted(p.name for p in SITE_BIN.iterdir() if p.name != "standin")

WRAPPER = """#!/bin/sh
# what a site's real tool would be: the stand-in, told the host it really runs on
export DAC_SITE_HOST="$(uname -n)" DAC_SITE_DIR={site}
slow={site}/slow/$DAC_SITE_HOST-{tool}
[ -e "$slow" ] && touch "$slow.started" && sleep "$(cat "$slow")"
exec {bin}/{tool} "$@"
"""


def sh(*argv: str, check: bool = True) -> subprocess.CompletedProcess:
    r = subprocess.run(argv, capture_output=True, text=True)
    if check and r.returncode:
        raise AssertionError(f"{' '.join(argv)}: rc {r.returncode}: {r.stderr.strip()}")
    return r


class Host:
    def __init__(self, site: Site, name: str, index: int):
        self.site, self.name = site, name
        self.address = f"{site.subnet}.{index + 10}"
        self.netns = f"dacmh-{site.token}-{name}"
        self.veth = f"dacmh{site.token}{index}"
        self.root = site.root / "hosts" / name
        self.holder: subprocess.Popen | None = None
        self.sshd: Sshd | None = None

    @property
    def enter(self) -> list[str]:
        """The command line prefix that runs a program on this host."""
        assert self.holder is not None
        # -r -w: the host's root and cwd as well; entering a mount namespace alone puts a
        # process at that namespace's real root, outside a chroot the tests may run in
        return ["nsenter", "-t", str(self.holder.pid), "-n", "-m", "-u", "-r", "-w", "--"]

    def boot(self) -> None:
        self.root.mkdir(parents=True)
        (self.root / "ansible").mkdir()
        (self.root / "hosts").write_text(self.site.etc_hosts())
        sh("ip", "netns", "add", self.netns)
        sh(
            "ip",
            "link",
            "add",
            self.veth,
            "type",
            "veth",
            "peer",
            "name",
            "eth0",
            "netns",
            self.netns,
        )
        sh("ip", "link", "set", self.veth, "master", self.site.bridge, "up")
        sh("ip", "-n", self.netns, "addr", "add", f"{self.address}/24", "dev", "eth0")
        sh("ip", "-n", self.netns, "link", "set", "eth0", "up")
        sh("ip", "-n", self.netns, "link", "set", "lo", "up")
        ready = self.root / "ready"
        # the host's own mount and UTS namespaces, held by a sleeping process: its hostname,
        # /etc/hosts, and /root/.ansible (Ansible's ssh ControlMaster sockets: shared between
        # hosts, they would cross-connect)
        script = (
            f"hostname {self.name} && mount --bind {self.root}/hosts /etc/hosts && "
            f"mount --bind {self.root}/ansible /root/.ansible && touch {ready} && "
            "exec sleep infinity"
        )
        Path("/root/.ansible").mkdir(exist_ok=True)
        self.holder = subprocess.Popen(
            [
                "ip",
                "netns",
                "exec",
                self.netns,
                "unshare",
                "--mount",
                "--uts",
                "--propagation",
                "private",
                "sh",
                "-c",
                script,
            ]
        )
        deadline = time.monotonic() + 10
        while not ready.exists():
            assert self.holder.poll() is None, f"host {self.name} did not boot"
            assert time.monotonic() < deadline, f"host {self.name} not ready within 10 s"
            time.sleep(0.05)
        # `ip netns exec`, unshare and sh each exec the next: the holder's pid is the sleep's
        self.sshd = Sshd(
            self.root / "sshd", Path(f"{self.site.key}.pub"), self.address, 22, prefix=self.enter
        ).start()

    def run(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess:
        return sh(*self.enter, *argv, check=check)

    def link(self, up: bool) -> None:
        """Cut this host off the network (or bring it back), as a failed node or switch port."""
        sh("ip", "-n", self.netns, "link", "set", "eth0", "up" if up else "down")

    def spawn(self, argv: list[str], log: Path, env: dict | None = None) -> subprocess.Popen:
        out = open(log, "ab")
        return subprocess.Popen(
            [*self.enter, *argv],
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
        )

    def destroy(self) -> None:
        if self.sshd is not None:
            self.sshd.stop()
        r = sh("ip", "netns", "pids", self.netns, check=False)
        for pid in r.stdout.split():  # whatever still runs there: ssh masters, dacd's children
            try:
                os.kill(int(pid), signal.SIGKILL)
            except (ProcessLookupError, ValueError):
                pass
        if self.holder is not None:
            self.holder.wait(10)
        sh("ip", "netns", "del", self.netns, check=False)
        sh("ip", "link", "del", self.veth, check=False)


class Site:
    """Servers srv1..srvN (one brick each, a lustre pool) and compute nodes node1..nodeM."""

    def __init__(self, root: Path, servers: int = 2, nodes: int = 2):
        self.root = root
        self.token = str(os.getpid() % 10000)
        self.subnet = f"10.231.{os.getpid() % 250}"
        self.bridge = f"dacmh{self.token}"
        self.controller = f"{self.subnet}.1"
        self.recorded = RecordedSite(root / "site", 0, bricks_per_host=1, release="2.16")
        self.servers = [Host(self, f"srv{i}", i) for i in range(1, servers + 1)]
        self.nodes = [Host(self, f"node{i}", 100 + i) for i in range(1, nodes + 1)]
        self.hosts = {h.name: h for h in self.servers + self.nodes}
        self.key: Path = root / "dacd_key"
        self.known_hosts = root / "ssh_known_hosts"
        self.bin = root / "bin"
        self.dacds: dict[str, subprocess.Popen] = {}
        self.etcd: EtcdServer | None = None

    def etc_hosts(self) -> str:
        return "127.0.0.1 localhost\n" + "".join(
            f"{h.address} {h.name}\n" for h in self.hosts.values()
        )

    def boot(self) -> Site:
        sh("ip", "link", "add", self.bridge, "type", "bridge")
        sh("ip", "addr", "add", f"{self.controller}/24", "dev", self.bridge)
        sh("ip", "link", "set", self.bridge, "up")
        keygen(self.key, "dacd")
        self._site_facts()
        self._wrappers()
        for host in self.hosts.values():
            host.boot()
        # the admin's known_hosts, from each host's own key file (docs/admin.md, "Host keys")
        self.known_hosts.write_text(
            "".join(
                f"{h.name},{h.address} {h.sshd.public_key()}\n"
                for h in self.hosts.values()
                if h.sshd is not None
            )
        )
        return self

    def _site_facts(self) -> None:
        facts = json.loads((self.recorded.root / "site.json").read_text())
        facts["hosts"] = {
            h.name: {"nid": f"{h.address}@tcp", "ranks": []} for h in self.hosts.values()
        }
        (self.recorded.root / "site.json").write_text(json.dumps(facts))
        for h in self.servers:
            device = self.device(h.name)
            Path(device).parent.mkdir(parents=True, exist_ok=True)
            Path(device).write_bytes(b"")
        (self.recorded.root / "slow").mkdir()

    def _wrappers(self) -> None:
        self.bin.mkdir()
        for tool in TOOLS:
            path = self.bin / tool
            path.write_text(WRAPPER.format(site=self.recorded.root, tool=tool, bin=SITE_BIN))
            path.chmod(0o755)

    def device(self, host: str) -> str:
        return str(self.recorded.root / host / "dev" / "nvme0n1")

    def slow(self, host: str, tool: str, seconds: int | None) -> Path:
        """Make `tool` on `host` take `seconds` before it runs (None: no more); the path
        that appears once a call has started waiting."""
        path = self.recorded.root / "slow" / f"{host}-{tool}"
        started = path.with_name(path.name + ".started")
        if seconds is None:
            path.unlink(missing_ok=True)
        else:
            started.unlink(missing_ok=True)
            path.write_text(str(seconds))
        return started

    def config(self, etcd: dict) -> dict:
        env = {"PATH": f"{self.bin}:/usr/sbin:/usr/bin:/sbin:/bin"}
        reach = {
            "ansible_user": "root",
            "ansible_ssh_private_key_file": str(self.key),
            "ansible_python_interpreter": "/usr/bin/python3",
            "dac_environment": env,
        }
        return {
            "etcd": {**etcd, "timeout": 5},
            "lease_ttl": 5,
            "pools": {
                "p": {
                    "granularity": "100GiB",
                    "backend": "lustre",
                    "lustre": {
                        "mgs": "per_buffer",
                        "mdt_size": "10GiB",
                        "release": "2.16",
                        "target_root": str(self.recorded.root / "targets"),
                    },
                }
            },
            "hosts": {
                h.name: {
                    "fs_root": str(self.recorded.root / h.name / "fs"),
                    "lnet_nid": f"{h.address}@tcp",
                    "ansible_vars": {"ansible_host": h.address, **reach},
                    "bricks": [
                        {
                            "device": self.device(h.name),
                            "capacity": "100GiB",
                            "pool": "p",
                            "name": "nvme0n1",
                        }
                    ],
                }
                for h in self.servers
            },
            "mount_root": "/mnt/dac",
            "node_root": str(self.recorded.root / "nodes" / "{node}"),
            "node_ansible_vars": reach,  # nodes by name: each server's /etc/hosts has them
            # quicker than the defaults (10 s, 5 x 3 s, 60 s: tests/system/test_ssh.py), so the
            # faults cost the suite less; the bound, 60 s, is asserted all the same
            "ssh": {
                "known_hosts": str(self.known_hosts),
                "connect_timeout": 5,
                "alive_interval": 2,
                "alive_count": 3,
                "unreachable_timeout": 20,
            },
        }

    def write_config(self, name: str, config: dict) -> Path:
        path = self.root / "etc" / name / "dac.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        return path

    def start_dacd(self, server: Host, config: Path, env: dict | None = None) -> None:
        """dacd as its systemd unit starts it: `dacd` with the config, the host from the
        hostname (its UTS namespace's); `env` over its environment (a test's copier pace)."""
        self.dacds[server.name] = server.spawn(
            [sys.executable, "-m", "dacd.main", "--config", str(config)],
            self.root / f"dacd-{server.name}.log",
            env={"DAC_CONFIG": str(config), **(env or {})},
        )

    def restart_dacd(self, name: str, sig: int = signal.SIGTERM, env: dict | None = None) -> None:
        """Stop `name`'s dacd with `sig` and start it again with the same config; returns once
        it registered (its log says so)."""
        proc, log = self.dacds[name], self.root / f"dacd-{name}.log"
        proc.send_signal(sig)
        proc.wait(30)
        size = log.stat().st_size
        self.start_dacd(self.hosts[name], self.root / "etc" / name / "dac.yaml", env)
        wait_for(
            lambda: f"host {name} registered" in log.read_text(errors="replace")[size:],
            60,
            f"dacd {name} registered again",
        )

    def destroy(self) -> None:
        for proc in self.dacds.values():
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(20)
                except subprocess.TimeoutExpired:
                    proc.kill()
        for host in self.hosts.values():
            host.destroy()
        sh("ip", "link", "del", self.bridge, check=False)
        if self.etcd is not None:
            self.etcd.stop()
        shutil.rmtree(self.root / "hosts", ignore_errors=True)


@contextmanager
def booted(settings=None):
    """A site booted with its etcd and a dacd per server, the config given `settings(root)`
    over Site.config's; (site, env, store) as tests/multihost/conftest.py's `mh` gives them."""
    root = Path(tempfile.mkdtemp(prefix="dacmh-"))
    root.chmod(0o755)  # the job's user reaches its mounts below it, as below a site's /mnt
    site = Site(root, nodes=3)  # a requeued job runs on another node set
    try:
        site.boot()
        site.etcd = EtcdServer(root / "etcd", address=site.controller).start()
        config = {**site.config(site.etcd.settings()), **(settings(root) if settings else {})}
        for server in site.servers:  # each server its own config file, as on a site
            site.start_dacd(server, site.write_config(server.name, config))
        path = site.write_config("controller", config)
        env = {"DAC_CONFIG": str(path), "DAC_ETCD_ENDPOINTS": ""}
        wait_for(
            lambda: pools(env).get("p", {}).get("total_bricks") == len(site.servers),
            60,
            "every server's dacd registered",
        )
        yield site, env, Store.from_settings(load_config(str(path), env={}).etcd)
    finally:
        site.destroy()
        shutil.rmtree(root, ignore_errors=True)
