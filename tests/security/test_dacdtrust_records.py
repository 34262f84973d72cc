"""dacd trusts nothing it reads (docs/security.md): bad records written straight to etcd, as a
stolen credential or a broken writer would, are each skipped with one log line by the dacd of
each host the record's claims name (a dacd reads only the buffers holding a brick of its host,
docs/architecture.md), no line by any other, and an admin error in the status, nothing of
root's happens for them (no mkfs, no file, no touched disk), and the buffers of two real
unprivileged users still reach created and mounted beside them. Real etcd, real dacd
processes, real playbooks, loop devices."""

import itertools
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
from clitools import BIN, reached, run, setup, slurm, wait_for

from daccore.etcd.types import put_op
from daccore.records.models import Buffer, BufferRequest, State
from daccore.rules.allocator import place
from daccore.services.buffers import allocation_of
from daccore.settings.config import load_config
from daccore.store import Store
from daclocal import loopdev

MiB = 1 << 20
USERS = [(1234, 4321), (5678, 8765)]
_jobs = itertools.count(500)


@pytest.fixture(scope="module")
def dacdtrust_dac():
    """A local DAC, 2 servers x 4 bricks of 512 MiB, shared by this module's tests: the bad
    records stay in etcd beside every later test's buffers."""
    top = Path(tempfile.mkdtemp(prefix="dac-test-"))
    top.chmod(0o755)
    workdir = top / "dac"
    run(
        "dacctl",
        "local",
        "up",
        "--workdir",
        str(workdir),
        "--servers",
        "2",
        "--bricks-per-server",
        "4",
        "--brick-size",
        "512MiB",
    )
    env = {"DAC_CONFIG": str(workdir / "dac.yaml"), "DAC_ETCD_ENDPOINTS": ""}
    try:
        yield workdir, env, Store.from_settings(load_config(env["DAC_CONFIG"], env={}).etcd)
    finally:
        run("dacctl", "local", "down", "--workdir", str(workdir), check=False)
        shutil.rmtree(top, ignore_errors=True)


def dacd_logs(workdir: Path) -> list[Path]:
    logs = sorted((workdir / "logs").glob("dacd-*.log"))
    assert len(logs) == 2, logs
    return logs


def lines_naming(workdir: Path, key: str) -> list[list[str]]:
    """Per dacd, the log lines that name `key` (followed by ':', so job 31 is not job 311)."""
    return [
        [line for line in log.read_text(errors="replace").splitlines() if f"{key}:" in line]
        for log in dacd_logs(workdir)
    ]


def assert_skipped_once(
    workdir: Path, store: Store, name: str, reason: str, hosts: set[str]
) -> None:
    """The dacd of each of `hosts` (those the record's claims name) logs one line naming the
    record's key and `reason`, and no more when the same record is written again (one line,
    not one per event); the other dacd, whose host holds no claim of it, logs nothing."""
    key = store.keys.buffer(name)
    logs = dacd_logs(workdir)
    named = [log.name.removeprefix("dacd-").removesuffix(".log") in hosts for log in logs]
    assert any(named), (hosts, logs)
    wait_for(
        lambda: all(
            lines or not n for lines, n in zip(lines_naming(workdir, key), named, strict=True)
        ),
        timeout=90,
        what=f"the dacd of {sorted(hosts)} to log {key}",
    )
    found = store.client.get(key)
    assert found is not None, key
    value = found.value
    for _ in range(3):  # three more events of the same bad record
        put_raw(store, name, value)
    time.sleep(2)
    for lines, n in zip(lines_naming(workdir, key), named, strict=True):
        if not n:
            assert lines == [], lines
            continue
        assert len(lines) == 1, lines
        assert reason in lines[0] and "ERROR" in lines[0], lines[0]


def assert_admin_error(store: Store, name: str, host: str, reason: str) -> None:
    """The host the record names says why in its status: a waiting Slurm call fails at once
    with one line, the admin's to act on."""
    status = wait_for(
        lambda: (s := store.status_docs(name).get(host)) and s.get("error") and s,
        timeout=90,
        what=f"{host}'s status of {name} to hold an error",
    )
    assert status["error"]["category"] == "admin", status
    assert reason in status["error"]["message"], status


def fs_of(workdir: Path, host: str, name: str) -> Path:
    return workdir / "fs" / host / name / "mnt"


def mounted(path: Path) -> bool:
    with open("/proc/self/mountinfo") as f:
        return any(line.split()[4] == str(path) for line in f)


def valid_buffer(
    store: Store,
    name: str,
    uid: int = 1234,
    gid: int = 4321,
    capacity=512 * MiB,
    job: int | None = None,
) -> Buffer:
    """A buffer as dacctl would write it, on bricks free now."""
    bricks = place(store.inventory(), capacity, "default")
    return Buffer(
        name=name,
        owner_uid=uid,
        owner_gid=gid,
        job_id=job,
        request=BufferRequest(capacity=capacity, pool="default"),
        allocation=allocation_of(bricks),
        created_at=time.time(),
    )


def put_raw(store: Store, name: str, doc) -> None:
    """Write a spec by hand, with the work key of every live host (what a forger would have
    to write for any dacd to look at it; a dacd holding no claim of it still ignores it)."""
    value = doc if isinstance(doc, (bytes, str)) else json.dumps(doc)
    store.client.txn(
        [],
        [put_op(store.keys.buffer(name), value)]
        + [put_op(store.keys.work(h, name), "") for h in sorted(store.alive())],
    )


def claim(store: Store, name: str, bricks: list[tuple[str, str]]) -> list[str]:
    """Claim keys naming buffer `name` on `bricks` ((host, brick) pairs), as the writer of a
    forged record would have to for any dacd to look at it; returns the keys."""
    keys = [store.keys.claim("default", host, brick) for host, brick in bricks]
    for key in keys:
        store.client.put(key, json.dumps({"buffer": name}))
    return keys


def release(store: Store, keys: list[str]) -> None:
    """The bricks free again; the record stays in etcd, which no dacd looks at now."""
    for key in keys:
        store.client.delete(key)


@pytest.mark.parametrize("owner", [(0, 0), (1234, 0), (0, 4321), (999, 4321)])
def test_dacdtrust_root_or_system_owner_is_refused(dacdtrust_dac, owner):
    """owner_uid 0 made the copier run as root; a record owned by root (or below
    min_owner_uid, 1000 by default) is never built."""
    workdir, env, store = dacdtrust_dac
    name = f"root{owner[0]}g{owner[1]}"
    buf = valid_buffer(store, name, *owner)
    store.create_buffer(buf)
    host = buf.allocation.primary_host
    assert_skipped_once(workdir, store, name, "min_owner_uid", {host})
    assert_admin_error(store, name, host, "min_owner_uid")
    assert not fs_of(workdir, host, name).exists() and not mounted(fs_of(workdir, host, name))


@pytest.fixture
def other_disk(tmp_path):
    """A disk that is no brick of dac's, with data on it."""
    path = tmp_path / "other-disk"
    device = loopdev.attach(path, 512 * MiB)  # big enough for mkfs.xfs: a real target
    marker = b"not dac's: a user's data\n" * 1000
    with open(device, "r+b") as f:
        f.write(marker)
        f.flush()
        os.fsync(f.fileno())
    yield device, marker
    loopdev.detach(device, path)


def test_dacdtrust_device_in_the_record_is_never_used(dacdtrust_dac, other_disk, tmp_path):
    """A brick's device was taken from the record: mkfs and wipefs of any disk. dacd takes it
    from its own config, by brick name: the buffer is built on its brick, the other disk is
    untouched through create and teardown."""
    workdir, env, store = dacdtrust_dac
    device, marker = other_disk
    buf = valid_buffer(store, "401", job=401)
    ref = buf.allocation.bricks[0]
    forged = buf.model_copy(
        update={
            "allocation": buf.allocation.model_copy(
                update={"bricks": [ref.model_copy(update={"device": device})]}
            )
        }
    )
    store.create_buffer(forged)
    wait_for(reached(store, "401", State.CREATED), what="created")
    config = load_config(env["DAC_CONFIG"], env={})
    brick = next(b for b in config.hosts[ref.host].bricks if b.brick_name == ref.brick)
    fs = fs_of(workdir, ref.host, "401")
    assert mounted(fs)
    source = subprocess.run(
        ["findmnt", "-n", "-o", "SOURCE", str(fs)], capture_output=True, text=True
    ).stdout.strip()
    assert source == brick.device != device
    slurm(env, "teardown", 401)
    wait_for(lambda: store.buffer("401") is None, what="the buffer to be reaped")
    with open(device, "rb") as f:
        assert f.read(len(marker)) == marker
    blkid = subprocess.run(["blkid", "-p", device], capture_output=True, text=True)
    assert blkid.returncode == 2 and blkid.stdout == "", blkid  # no filesystem signature


def jinja(tmp: Path, n: str) -> dict[str, str]:
    return {
        "key": f"{{{{ lookup('pipe', 'touch {tmp}/pwned-key-{n}') }}}}",
        "statement": f"{{% set x = lookup('pipe', 'touch {tmp}/pwned-statement-{n}') %}}",
        "comment": f"{{# #}}{{{{ query('pipe', 'touch {tmp}/pwned-comment-{n}') }}}}",
    }


@pytest.mark.parametrize("where", ["job key", "node name"])
@pytest.mark.parametrize("payload", ["key", "statement", "comment"])
def test_dacdtrust_attachments_never_reach_jinja(dacdtrust_dac, open_dir_for_pwned, where, payload):
    """Attachment keys and node names ended in Ansible extra-vars, rendered as Jinja
    (`{{ lookup('pipe', ...) }}` ran as root). A record holding one is refused, and nothing
    runs."""
    workdir, env, store = dacdtrust_dac
    n = f"{['job key', 'node name'].index(where)}{payload}"
    name = str(next(_jobs))
    buf = valid_buffer(store, name, job=int(name))
    store.create_buffer(buf)
    wait_for(reached(store, name, State.CREATED), what="created")
    doc = json.loads(store.client.get(store.keys.buffer(name)).value)
    value = jinja(open_dir_for_pwned, n)[payload]
    doc["attachments"] = {value: ["node1"]} if where == "job key" else {name: ["node1", value]}
    doc["generation"] += 1
    put_raw(store, name, doc)
    assert_skipped_once(workdir, store, name, "attachments", set(buf.allocation.hosts))
    assert_admin_error(store, name, buf.allocation.primary_host, "attachments")
    assert list(open_dir_for_pwned.iterdir()) == []
    assert not list((workdir / "nodes").rglob("striped"))  # no node mounted anything
    # a writer putting a sane record back is acted on again: the brick is freed
    doc["attachments"], doc["generation"] = {}, doc["generation"] + 1
    put_raw(store, name, doc)
    wait_for(
        lambda: all(
            s.error is None and s.state is State.CREATED for s in store.statuses(name).values()
        ),
        what="created again",
    )
    slurm(env, "teardown", name)
    wait_for(lambda: store.buffer(name) is None, what="the buffer to be reaped")


@pytest.fixture
def open_dir_for_pwned():
    path = Path(tempfile.mkdtemp(prefix="dacdtrust-pwned-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.mark.parametrize("raw", [b"{not json", b"\xff\xfe\x00garbage", b"[]", b'{"name": 7}'])
def test_dacdtrust_unreadable_record_never_stalls_the_watch(dacdtrust_dac, tmp_path, raw):
    """One malformed buffers/<name> record made every dacd's watch retry the same revision
    forever: no later buffer was ever built. Now it is logged once and skipped, and a job's
    buffer written after it is built and mounted."""
    workdir, env, store = dacdtrust_dac
    name = f"junk{raw[:2].hex()}"
    put_raw(store, name, raw)
    brick = place(store.inventory(), 512 * MiB, "default")[0]
    held = claim(store, name, [(brick.host, brick.name)])  # that host's dacd reads it now
    assert_skipped_once(workdir, store, name, store.keys.buffer(name), {brick.host})
    release(store, held)
    job = next(_jobs)
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/sh\n#DW jobdw capacity=512MiB access_mode=striped pool=default\n")
    call = subprocess.Popen(
        [
            str(BIN / "dacctl"),
            "--function",
            "setup",
            "--token",
            str(job),
            "--caller",
            "SLURM",
            "--user",
            "5678",
            "--groupid",
            "8765",
            "--job",
            str(script),
        ],
        env={**os.environ, **env},
    )
    try:
        wait_for(reached(store, str(job), State.CREATED), timeout=60, what="the next buffer")
        assert call.wait(60) == 0
    finally:
        call.kill()
        call.wait()
    slurm(env, "teardown", job)


@pytest.mark.parametrize(
    "capacity,reason", [(1 << 62, "request.capacity"), (1 << 59, "more than its bricks hold")]
)
def test_dacdtrust_huge_capacity_is_refused(dacdtrust_dac, capacity, reason):
    """A capacity beyond what the record's bricks hold (or beyond any pool) is refused, not
    built and staged into."""
    workdir, env, store = dacdtrust_dac
    name = f"huge{capacity.bit_length()}"
    doc = valid_buffer(store, name).model_dump(mode="json")
    doc["request"]["capacity"] = capacity
    put_raw(store, name, doc)
    held = claim(store, name, [(b["host"], b["brick"]) for b in doc["allocation"]["bricks"]])
    host = doc["allocation"]["primary_host"]
    assert_skipped_once(workdir, store, name, reason, {host})
    assert_admin_error(store, name, host, reason)
    assert not fs_of(workdir, host, name).exists()
    release(store, held)


def test_dacdtrust_valid_buffers_of_two_users_run_beside_the_bad_records(dacdtrust_dac, tmp_path):
    """With every bad record above still in etcd, two users' jobs are built, mounted on their
    nodes, theirs alone, and torn down."""
    workdir, env, store = dacdtrust_dac
    nodes = tmp_path / "nodes"
    nodes.write_text("node1\n")
    for job, (uid, gid) in zip((701, 702), USERS, strict=True):
        script = setup(env, tmp_path, job, "512MiB", uid=uid, gid=gid)
        slurm(env, "pre_run", job, "--job", str(script), "--nodehostnamefile", str(nodes))
        statuses = wait_for(reached(store, str(job), State.MOUNTED), what="mounted")
        (host,) = statuses
        st = os.stat(fs_of(workdir, host, str(job)) / "striped")
        assert (st.st_uid, st.st_gid, st.st_mode & 0o777) == (uid, gid, 0o700)
    for job in (701, 702):
        slurm(env, "teardown", job)
        wait_for(lambda job=job: store.buffer(str(job)) is None, what="the buffer to be reaped")
