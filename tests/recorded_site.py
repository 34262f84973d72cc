"""A recorded-command site for the lustre and daos playbooks: storage servers and compute nodes
that are all this machine, reached by Ansible's local connection, with the strict stand-ins of
tests/site/bin first on PATH (through dac's per-host `dac_environment` inventory variable).
Brick devices are placeholder files; every tool call lands in commands.jsonl.
"""

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from daccore.backends import get
from daccore.records.models import Allocation, BrickRef, Buffer, BufferRequest
from daccore.settings.config import DacConfig
from dacd.runner import run_step

SITE_BIN = Path(__file__).resolve().parent / "site" / "bin"
sys.path.insert(0, str(SITE_BIN.parent))  # the stand-ins' own modules, as bin/standin finds them
from acl_tools import access_acl  # noqa: E402

GiB = 1 << 30
NODES = ("node1", "node2")


#: the releases whose stand-ins the lustre and daos suites run against (tests/site)
LUSTRE_RELEASES = ("2.15", "2.16")
DAOS_RELEASES = ("2.6",)


def passable_only_to(uid: int) -> str:
    """The access ACL of a directory on the way to a buffer's mounts (`<node root>/<job>/`,
    `persistent/`, a server's `<fs_root>/<buffer>/`: daccore.backends.lustre.passable_to), as
    access_acl shows it: root does all, the owner only passes, the mask is --x."""
    return f"u::rwx,u:{uid}:--x,g::---,m::--x,o::---"


def closure(path: str | Path) -> tuple[int, str, str | None]:
    """(owner uid, mode, access ACL) of a directory: (0, "0o710", passable_only_to(uid)) for
    one only root and that uid may pass (the ACL's mask shows as the group bits)."""
    st = os.stat(path)
    return st.st_uid, oct(st.st_mode & 0o7777), access_acl(str(path))


#: what another user does to hold a buffer's mount open, or read its usage (issue 45): an
#: O_PATH open needs no permission on its target, only search permission above it
PROBE = """
import errno, os, sys
try:
    os.close(os.open(sys.argv[1], os.O_PATH))
    os.statvfs(sys.argv[1])
    print("ok")
except OSError as e:
    print(errno.errorcode[e.errno])
"""


def reach(path: str | Path, uid: int, gid: int) -> str:
    """What `uid` gets opening `path` O_PATH and statvfs-ing it, as that user: "ok" or the
    errno's name ("EACCES")."""
    out = subprocess.run(
        [sys.executable, "-I", "-S", "-c", PROBE, str(path)],
        user=uid,
        group=gid,
        extra_groups=[],
        cwd="/",
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    )
    return out.stdout.strip()


class RecordedSite:
    """`release`: the Lustre release the site's stand-ins follow (and dac's config says);
    `by_id`: bricks named by udev's persistent links (<host>/dev/disk/by-id/nvme-DAC_<n>);
    `daos`: extra DAOS facts per host (targets, scm_bytes, nvme_bytes: daos_tools.py)."""

    def __init__(
        self,
        root: Path,
        hosts: int,
        bricks_per_host: int = 2,
        release: str = "2.15",
        by_id: bool = False,
        daos: dict | None = None,
        brick: int = 100 * GiB,
        granularity: int = 100 * GiB,
    ):
        self.root, self.release, self.by_id = root, release, by_id
        self.brick, self.granularity = brick, granularity
        self.hosts = [f"dac{i}" for i in range(1, hosts + 1)]
        self.bricks_per_host = bricks_per_host
        root.mkdir(parents=True, exist_ok=True)
        root.chmod(0o777)  # the stand-ins also run as the job's user (setpriv)
        facts: dict[str, Any] = {
            "hosts": {
                h: {"nid": f"10.0.0.{i}@tcp", "ranks": [2 * i - 2, 2 * i - 1], **(daos or {})}
                for i, h in enumerate(self.hosts, 1)
            },
            "lustre": {"release": release},
            "daos": {"release": "2.6"},
        }
        facts["hosts"]["mgs1"] = {"nid": "10.0.0.100@tcp", "ranks": []}
        (root / "site.json").write_text(json.dumps(facts))
        for h in self.hosts:
            for b in range(bricks_per_host):
                path = Path(self.device(h, b))
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(b"")
        for name in ("commands.jsonl", "state.json", "state.lock"):
            (root / name).touch(mode=0o666)
            (root / name).chmod(0o666)
        if not (root / "state.json").read_text():
            (root / "state.json").write_text("{}")

    def env(self, host: str) -> dict:
        return {
            "PATH": f"{SITE_BIN}:{os.environ['PATH']}",
            "DAC_SITE_DIR": str(self.root),
            "DAC_SITE_HOST": host,
        }

    def device(self, host: str, brick: int) -> str:
        if self.by_id:
            return str(self.root / host / "dev" / "disk" / "by-id" / f"nvme-DAC_{brick}")
        return str(self.root / host / "dev" / f"nvme{brick}n1")

    def config(self, backend: str, etcd: str | dict | None = None, **settings) -> dict:
        """A dac config (as data) with one pool `p` of this backend over every brick."""
        pool: dict[str, Any] = {"granularity": self.granularity, "backend": backend}
        if backend == "lustre":
            pool["lustre"] = {
                "mgs": "per_buffer",
                "mdt_size": "10GiB",
                "release": self.release,
                "target_root": str(self.root / "targets"),
                **settings,
            }
        else:
            pool["daos"] = {"provider": "ofi+tcp", **settings}
        hosts = {
            h: {
                "fs_root": str(self.root / h / "fs"),
                "lnet_nid": f"10.0.0.{i}@tcp",
                "daos_ranks": {0: 2 * i - 2},
                "ansible_vars": {"ansible_connection": "local", "dac_environment": self.env(h)},
                "bricks": [
                    {
                        "device": self.device(h, b),
                        "capacity": self.brick,
                        "pool": "p",
                        "name": f"nvme{b}n1",
                    }
                    for b in range(self.bricks_per_host)
                ],
            }
            for i, h in enumerate(self.hosts, 1)
        }
        mgs = pool.get("lustre", {}).get("mgs")
        if isinstance(mgs, dict):
            mgs.setdefault(
                "ansible_vars", {"ansible_connection": "local", "dac_environment": self.env("mgs1")}
            )
        config = {
            "pools": {"p": pool},
            "hosts": hosts,
            "ansible_forks": 1,
            "mount_root": "/mnt/dac",
            "node_root": str(self.root / "nodes" / "{node}"),
            "node_ansible_vars": {
                "ansible_connection": "local",
                "dac_environment": self.env("{{ inventory_hostname }}"),
            },
        }
        if etcd:  # an endpoint, or the `etcd` settings of a secure server (TLS files, roles)
            config["etcd"] = {
                **(etcd if isinstance(etcd, dict) else {"endpoints": [etcd]}),
                "timeout": 5,
            }
            config["lease_ttl"] = 5
        return config

    def write_config(self, config: dict) -> Path:
        path = self.root / "dac.yaml"
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        return path

    def buffer(
        self,
        bricks: list[tuple[str, int]],
        access="striped",
        uid=1000,
        gid=1000,
        attachments=None,
        name="42",
        capacity: int | None = None,
    ) -> Buffer:
        """A buffer on these bricks; by default it asks for a granularity per brick."""
        capacity = capacity or self.granularity * len(bricks)
        return Buffer(
            name=name,
            owner_uid=uid,
            owner_gid=gid,
            created_at=1.0,
            request=BufferRequest(capacity=capacity, pool="p", access=access),
            attachments=attachments or {},
            allocation=Allocation(
                primary_host=bricks[0][0],
                bricks=[
                    BrickRef(
                        host=h, brick=f"nvme{b}n1", device=self.device(h, b), capacity=self.brick
                    )
                    for h, b in bricks
                ],
            ),
        )

    def run(
        self, config: dict, backend: str, buf: Buffer, step: str, attached=None, on_task=None
    ) -> None:
        """One lifecycle step, as the buffer's primary dacd runs it."""
        b = get(backend, DacConfig.model_validate(config), buf.allocation.primary_host)
        run_step(
            backend,
            step,
            buf.allocation.primary_host,
            b.variables(buf, step, attached),
            on_task,
            inventory=b.inventory(buf, step, attached),
            forks=1,
        )

    def commands(self, clear: bool = True) -> list[tuple]:
        """(host, argv...) of every call since the last look; site paths shown as <site>."""
        return self.commands_of(self.calls(clear))

    def commands_of(self, calls: list[dict]) -> list[tuple]:
        root = str(self.root)
        return [(c["host"], *(a.replace(root, "<site>") for a in c["argv"])) for c in calls]

    def calls(self, clear: bool = True) -> list[dict]:
        path = self.root / "commands.jsonl"
        calls = [json.loads(line) for line in path.read_text().splitlines()]
        if clear:
            path.write_text("")
        return calls

    def state(self) -> dict:
        return json.loads((self.root / "state.json").read_text())

    def fail(
        self,
        tool: str,
        contains: list[str],
        host: str | None = None,
        stderr: str = "injected failure",
        rc: int = 1,
    ) -> None:
        fault = {
            "tool": tool,
            "contains": contains,
            "rc": rc,
            "stderr": stderr,
            **({"host": host} if host else {}),
        }
        path = self.root / "faults.json"
        path.write_text(json.dumps([fault]))
        path.chmod(0o666)  # a stand-in running as the job's user takes the fault

    def tool(self, host: str, *argv: str) -> None:
        """Run a stand-in by hand on `host`, as a site's admin would run the real tool."""
        subprocess.run(
            [str(SITE_BIN / argv[0]), *argv[1:]],
            check=True,
            capture_output=True,
            env={**os.environ, **self.env(host)},
        )

    def start_shared_mgs(self, host: str) -> None:
        """The site's long-lived MGS, formatted and started once by its admin."""
        device, mount_point = self.root / host / "dev" / "mgs", self.root / host / "mgs"
        device.parent.mkdir(parents=True, exist_ok=True)
        device.write_bytes(b"")
        mount_point.mkdir()
        self.tool(host, "mkfs.lustre", "--mgs", str(device))
        self.tool(host, "mount", "-t", "lustre", str(device), str(mount_point))
        self.calls()

    def start_dacd(self, config_path: Path, host: str) -> subprocess.Popen:
        log = open(self.root / f"dacd-{host}.log", "ab")
        return subprocess.Popen(
            [sys.executable, "-m", "dacd.main", "--config", str(config_path), "--host", host],
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "DAC_CONFIG": str(config_path)},
        )
