"""Issue 19's long runs: the etcd leader killed (-9) under load, on three etcd members.

storm  200 setups and teardowns of mixed sizes (1-3 bricks, and one in ten of 100 bricks, past
       what one transaction claims), 20 at a time, as Slurm's setup and teardown make them,
       against 20 simulated storage hosts x 12 bricks whose leases are kept alive as dacd keeps
       them; the leader is killed once a third of the requests are in. Every request either
       held its buffer and tore it down, or was refused in one line (a request whose refusal
       came from etcd is torn down, as Slurm tears down a job whose setup failed). While it runs,
       a sampler reads every buffer once every 0.1 s: no brick in two buffers. Afterwards, read
       back from etcd: no claim, no buffer, no intent left; every host still alive.
jobs   8 staged jobs on a local DAC (2 servers x 4 bricks of 512 MiB, real dacd, playbooks,
       loop devices) through setup, data_in, pre_run, post_run, data_out and teardown, the
       leader killed while they run: every job completes, every staged-out file identical,
       every brick back, no host ever down.

    .venv/bin/python bench/faults.py [storm] [jobs]      (as root; both by default)
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import TIB, host_records, local_dac, percentiles, pool_record, steal_meter  # noqa: E402

from daccore.errors import DacError  # noqa: E402
from daccore.etcd.auth import Credential  # noqa: E402
from daccore.etcd.client import EtcdClient  # noqa: E402
from daccore.records.models import Buffer, BufferRequest  # noqa: E402
from daccore.services.buffers import allocate_buffer  # noqa: E402
from daccore.store import Store  # noqa: E402
from daclocal.etcd_server import EtcdCluster  # noqa: E402

HOSTS, BRICKS, REQUESTS, WORKERS, BIG = 20, 12, 200, 20, 100
JOBS = 8


def leader_pid(pki: Path, members: list[tuple[int, int]]) -> int:
    """The pid of the member that leads now, of (pid, client port) pairs, asked with etcdctl."""
    env = {
        "ETCDCTL_API": "3",
        "ETCDCTL_CACERT": str(pki / "ca.pem"),
        "ETCDCTL_CERT": str(pki / "client.pem"),
        "ETCDCTL_KEY": str(pki / "client.key"),
        "PATH": "/usr/bin:/bin",
    }
    r = subprocess.run(
        [
            "etcdctl",
            "--endpoints",
            ",".join(f"https://127.0.0.1:{port}" for _, port in members),
            "--command-timeout",
            "3s",
            "endpoint",
            "status",
            "-w",
            "json",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )
    for s in json.loads(r.stdout):
        if s["Status"]["header"]["member_id"] == s["Status"]["leader"]:
            port = int(s["Endpoint"].rsplit(":", 1)[1])
            return next(pid for pid, p in members if p == port)
    raise SystemExit(f"no leader: {r.stdout}{r.stderr}")


class Sampler(threading.Thread):
    """Reads every buffer once every 0.1 s, in one read: a brick in two buffers is a double
    claim. Counts the hosts it finds down too."""

    def __init__(self, store: Store, hosts: int):
        super().__init__(daemon=True)
        self.store, self.hosts = store, hosts
        self.stop = threading.Event()
        self.double: list[tuple[str, str]] = []  # a brick held by two buffers
        self.down: list[int] = []  # hosts alive, when not all
        self.samples, self.failed_reads = 0, 0

    def run(self) -> None:
        while not self.stop.wait(0.1):
            try:
                held: dict = {}
                for name, b in self.store.buffers().items():
                    for brick in b.allocation.bricks:
                        if held.setdefault((brick.host, brick.brick), name) != name:
                            self.double.append((brick.host, brick.brick))
                alive = len(self.store.alive())
                if alive != self.hosts:
                    self.down.append(alive)
                self.samples += 1
            except DacError:  # a read during the election
                self.failed_reads += 1


def storm() -> bool:
    with tempfile.TemporaryDirectory(prefix="dac-bench-") as d:
        cluster = EtcdCluster(Path(d), 3).start()
        s = cluster.settings()
        admin = Credential(f"{s['credentials_dir']}/admin", "admin")
        store = Store(
            EtcdClient(
                s["endpoints"],
                cacert=s["cacert"],
                cert=s["cert"],
                key=s["key"],
                timeout=10,
                credential=admin,
            )
        )
        try:
            return _storm(store, cluster)
        finally:
            cluster.stop()


def _storm(store: Store, cluster: EtcdCluster) -> bool:
    store.ensure_pool(pool_record("across_servers"))
    keepers = []
    for h in host_records(HOSTS, BRICKS):
        store.register_host(h)
        keepers.append(store.keep_alive(h.name, 5))  # dacd's lease, kept the way dacd does
    outcomes: Counter = Counter()
    reasons: Counter = Counter()
    multi_line: list[str] = []
    took: list[float] = []
    started = threading.Semaphore(0)

    def teardown(name: str) -> None:
        """Slurm's teardown: until the buffer is gone, whatever etcd answers meanwhile."""
        for _ in range(100):
            try:
                current = store.buffer(name)
                if current is None:
                    return
                store.delete_buffer(name, current.mod_revision)
            except DacError:
                time.sleep(0.2)
        raise SystemExit(f"{name}: teardown never succeeded")

    def request(i: int) -> None:
        started.release()
        t0 = time.perf_counter()
        rng = random.Random(i)
        bricks = BIG if i % 10 == 5 else rng.randint(1, 3)
        name = f"job{i}"

        def make(allocation):
            return Buffer(
                name=name,
                owner_uid=1000,
                owner_gid=1000,
                job_id=i,
                request=BufferRequest(capacity=bricks * TIB, pool="default"),
                allocation=allocation,
            )

        try:
            allocate_buffer(store, make, capacity=bricks * TIB, pool="default", rng=rng)
            outcomes["held"] += 1
            time.sleep(rng.uniform(0, 0.05))  # the job's run
        except DacError as e:
            outcomes["refused"] += 1
            reasons[re.sub(r"\d+", "N", str(e))[:70]] += 1
            if "\n" in str(e):
                multi_line.append(str(e))
        teardown(name)  # Slurm tears down a job whose setup failed, too
        took.append((time.perf_counter() - t0) * 1000)

    sampler = Sampler(store, HOSTS)
    sampler.start()
    steal = steal_meter()
    members = [(m.pid, m.client_port) for m in cluster.members]
    victim = leader_pid(cluster.pki_dir, members)
    start = time.perf_counter()
    with ThreadPoolExecutor(WORKERS) as pool:
        futures = [pool.submit(request, i) for i in range(REQUESTS)]
        for _ in range(REQUESTS // 3):
            started.acquire()
        os.kill(victim, signal.SIGKILL)
        killed = time.perf_counter()
        for f in futures:
            f.result()
    wall = time.perf_counter() - start
    time.sleep(1)
    sampler.stop.set()
    sampler.join(5)
    claims, buffers = store.claims(), store.buffers()
    intents, _ = store.client.range(store.keys.intents, store.keys.intents + "\xff")
    alive = store.alive()
    for k in keepers:
        k.stop()
    problems = []
    if sampler.double:
        problems.append(f"{len(sampler.double)} double claims seen, e.g. {sampler.double[0]}")
    if claims or buffers or intents:
        problems.append(
            f"left: {len(claims)} claims, {len(buffers)} buffers, {len(intents)} intents"
        )
    if len(alive) != HOSTS or sampler.down:
        problems.append(
            f"hosts down: {len(alive)} alive at the end; samples with hosts down: "
            f"{len(sampler.down)}"
        )
    if multi_line:
        problems.append(f"{len(multi_line)} refusals of more than one line: {multi_line[0]!r}")
    if outcomes["held"] + outcomes["refused"] != REQUESTS:
        problems.append(f"outcomes {dict(outcomes)} for {REQUESTS} requests")
    print(
        f"storm: {REQUESTS} setups+teardowns of 1-3 and {BIG} bricks, {WORKERS} at a time, "
        f"{HOSTS}x{BRICKS} bricks, 3 members, leader (pid {victim}) killed "
        f"{killed - start:.1f}s in: {outcomes['held']} held and torn down, "
        f"{outcomes['refused']} refused ({dict(reasons)}); {wall:.1f}s wall; setup+teardown "
        f"{percentiles(took)}; "
        f"{sampler.samples} samples, {sampler.failed_reads} reads failed during the "
        f"election, 0 double claims: {not sampler.double}; {steal()}"
    )
    return verdict("storm with the leader killed", problems)


def jobs() -> bool:
    with local_dac(servers=2, bricks_per_server=4, etcd_members=3) as (state, env, work):
        return _jobs(state, env, work)


def _jobs(state, env: dict, work: Path) -> bool:
    from daccore.settings.config import load_config

    store = Store.from_settings(load_config(str(state.config_path), env={}).etcd)
    src, out = work / "src", work / "out"
    src.mkdir(mode=0o755)
    out.mkdir(mode=0o755)
    os.chown(out, 1234, 4321)
    data = os.urandom(64 << 20)
    (src / "input").write_bytes(data)
    os.chmod(src / "input", 0o644)
    nodes = work / "nodes"
    nodes.write_text("node1\n")
    dacctl = str(Path(sys.executable).parent / "dacctl")
    errors: list[str] = []
    done: dict[int, float] = {}

    def call(function: str, job: int, *args: str) -> None:
        r = subprocess.run(
            [dacctl, "--function", function, "--token", str(job), *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        if r.returncode != 0:
            raise RuntimeError(f"{function}: {r.stdout}{r.stderr}".strip())

    def lifecycle(job: int) -> None:
        script = work / f"job{job}.sh"
        script.write_text(
            "#!/bin/sh\n#DW jobdw capacity=512MiB access_mode=striped,private pool=default\n"
            f"#DW stage_in type=file source={src}/input destination=$DW_JOB_STRIPED/input\n"
            f"#DW stage_out type=file source=$DW_JOB_STRIPED/input destination={out}/{job}\n"
        )
        try:
            call(
                "setup",
                job,
                "--caller",
                "SLURM",
                "--user",
                "1234",
                "--groupid",
                "4321",
                "--job",
                str(script),
            )
            for f in ("data_in", "pre_run", "post_run", "data_out", "teardown"):
                call(f, job, "--job", str(script), "--nodehostnamefile", str(nodes))
            done[job] = time.monotonic()
        except Exception as e:  # noqa: BLE001 - reported with the job
            errors.append(f"job {job}: {e}")

    sampler = Sampler(store, 2)
    sampler.start()
    threads = [threading.Thread(target=lifecycle, args=(j,)) for j in range(1, JOBS + 1)]
    start = time.monotonic()
    for t in threads:
        t.start()
    while not any(
        s.step.startswith("stage_in")
        for j in range(1, JOBS + 1)
        for s in store.statuses(str(j)).values()
    ):
        if time.monotonic() - start > 300:
            raise SystemExit("no stage-in started")
        time.sleep(0.1)
    members = [(m["pid"], m["client_port"]) for m in state.etcd["members"]]
    victim = leader_pid(Path(state.workdir) / "etcd" / "pki", members)
    os.kill(victim, signal.SIGKILL)
    killed = time.monotonic()
    for t in threads:
        t.join(900)
    sampler.stop.set()
    sampler.join(5)
    problems = list(errors)
    digest = hashlib.sha256(data).hexdigest()
    wrong = [
        j
        for j in range(1, JOBS + 1)
        if not (out / str(j)).exists()
        or hashlib.sha256((out / str(j)).read_bytes()).hexdigest() != digest
    ]
    if wrong:
        problems.append(f"staged-out files missing or different: jobs {wrong}")
    if store.claims() or store.buffers():
        problems.append(f"left: {len(store.claims())} claims, {len(store.buffers())} buffers")
    if sampler.double or sampler.down:
        problems.append(
            f"double claims {len(sampler.double)}, samples with a host down {len(sampler.down)}"
        )
    after = sorted(t - killed for t in done.values())
    print(
        f"jobs: {JOBS} jobs (64 MiB in, 64 MiB out each), leader killed "
        f"{killed - start:.1f}s in, during the stage-ins: {len(done)}/{JOBS} completed, the "
        f"last {after[-1] if after else float('nan'):.1f}s after the kill; "
        f"{sampler.samples} samples, {sampler.failed_reads} reads failed during the election"
    )
    return verdict("staged jobs with the leader killed", problems)


def verdict(case: str, problems: list[str]) -> bool:
    for p in problems:
        print("PROBLEM:", p)
    print(f"{case}: {'PASS' if not problems else 'FAIL'}")
    return not problems


def main(argv: list[str]) -> int:
    chosen = argv or ["storm", "jobs"]
    ok = True
    for name in chosen:
        ok = {"storm": storm, "jobs": jobs}[name]() and ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
