"""The admin and user commands (hosts, buffers, show, drain, undrain, create-persistent,
destroy-persistent, estimate) against a real local DAC with real dacd processes.

Another user's view is tested by running dacctl for real as uid 1234 (`as_user`), not by
faking os.getuid: the venv's python is a symlink into /root/.pyenv, which other users cannot
enter, so the user's dacctl runs under the system's python3 (the same minor version, checked)
with the venv's site-packages added, as dacd's copier runs the system python3 for the same
reason. The kernel then checks every path as that user, which `estimate` depends on.
"""

import json
import os
import signal
import subprocess
import sys
import sysconfig

from clitools import pools, run, setup, slurm, wait_for
from mounts import mount_of

UID, GID = 1234, 4321
SYSTEM_PYTHON = "/usr/bin/python3"
_BOOT = (
    "import site, sys; site.addsitedir(sys.argv.pop(1)); from dacctl.main import main; "
    "sys.exit(main(sys.argv[1:]))"
)


def as_user(env, *args, uid=UID, gid=GID, groups=()):
    """`dacctl *args` run as `uid`:`gid` with `groups` as its supplementary groups."""
    version = subprocess.run(
        [SYSTEM_PYTHON, "-c", "import sys; print(sys.version_info[:2])"],
        capture_output=True,
        text=True,
    ).stdout.strip()
    assert version == str(tuple(sys.version_info[:2])), (
        f"{SYSTEM_PYTHON} is {version}, the venv's python {sys.version_info[:2]}"
    )
    extra = [f"--groups={','.join(map(str, groups))}"] if groups else ["--clear-groups"]
    return subprocess.run(
        [
            "setpriv",
            f"--reuid={uid}",
            f"--regid={gid}",
            *extra,
            SYSTEM_PYTHON,
            "-c",
            _BOOT,
            sysconfig.get_paths()["purelib"],
            *args,
        ],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def dacctl_json(env, *args):
    return json.loads(run("dacctl", *args, "--json", env=env).stdout)


def hosts(env):
    return {h["name"]: h for h in dacctl_json(env, "hosts")["hosts"]}


def one_line(r):
    """A refusal: exit 1 and a single line on stderr."""
    assert r.returncode == 1 and len(r.stderr.splitlines()) == 1, (r.returncode, r.stderr)
    return r.stderr.strip()


def test_hosts_show_bricks_buffers_drain_undrain_and_down(dac, tmp_path):
    workdir, env, store = dac
    before = hosts(env)
    assert {h["state"] for h in before.values()} == {"up"}
    assert dacctl_json(env, "hosts")["site_warnings"] == []  # no burst_buffer.conf named here
    assert all(
        h["pools"]["default"] == {"bricks": 2, "free": 2, "claimed": 0} for h in before.values()
    )
    setup(env, tmp_path, 5, "512MiB")
    busy = store.buffer("5").record.allocation.primary_host
    (idle,) = set(before) - {busy}
    now = hosts(env)
    assert now[busy]["buffers"] == ["5"] and now[idle]["buffers"] == []
    assert now[busy]["pools"]["default"] == {"bricks": 2, "free": 1, "claimed": 1}

    assert (
        run("dacctl", "drain", busy, env=env).stdout
        == f"host {busy} drained; still on it: 1 buffer (5)\n"
    )
    assert hosts(env)[busy]["state"] == "drained" and pools(env)["default"]["hosts_drained"] == 1
    table = run("dacctl", "hosts", env=env).stdout.splitlines()
    assert table[0].split() == ["HOST", "STATE", "LEASE", "BRICKS", "FREE/TOTAL", "BUFFERS"]
    (row,) = [line.split() for line in table[1:] if line.startswith(busy)]
    assert row[:2] == [busy, "drained"] and row[4:6] == ["default", "1/2"]
    assert row[2].endswith("s") and int(row[2][:-1]) <= 5 and row[3] == "ago"  # lease_ttl 5
    assert 0 <= hosts(env)[busy]["lease_age"] <= 5
    # placement skips the drained host, though its free brick is the best fit
    setup(env, tmp_path, 6, "512MiB")
    assert store.buffer("6").record.allocation.hosts == [idle]

    assert (
        one_line(run("dacctl", "drain", "nope", env=env, check=False))
        == f"dacctl: user error: unknown host 'nope' (hosts: {', '.join(sorted(before))})"
    )
    assert (
        one_line(as_user(env, "undrain", busy))
        == "dacctl: user error: only root or the admin group may undrain hosts"
    )
    assert (
        one_line(as_user(env, "drain", idle))
        == "dacctl: user error: only root or the admin group may drain hosts"
    )
    assert hosts(env)[idle]["state"] == "up"
    assert run("dacctl", "undrain", busy, env=env).stdout == f"host {busy} undrained\n"
    assert hosts(env)[busy]["state"] == "up" and pools(env)["default"]["hosts_drained"] == 0

    # a dacd stopped cleanly revokes its lease: its host is down at once
    state = json.loads((workdir / "state.json").read_text())
    os.kill(next(d["pid"] for d in state["dacd"] if d["host"] == idle), signal.SIGTERM)
    wait_for(lambda: hosts(env)[idle]["state"] == "down", timeout=30, what=f"{idle} down")
    assert hosts(env)[idle]["alive"] is False and hosts(env)[idle]["buffers"] == ["6"]

    # a buffer stranded on a host gone for good: forget it (root only, never with live hosts)
    assert one_line(run("dacctl", "forget", "5", env=env, check=False)) == (
        f"dacctl: user error: buffer '5' has live hosts ({busy}): tear it down instead "
        "(scancel the job, or dacctl destroy-persistent); forget is for buffers whose hosts "
        "are gone"
    )
    assert (
        one_line(as_user(env, "forget", "6"))
        == "dacctl: user error: only root or the admin group may forget buffers"
    )
    assert run("dacctl", "forget", "6", env=env).stdout == (
        f"buffer 6 forgotten; its bricks on {idle} are free again in dac: wipe them before "
        "those hosts come back\n"
    )
    assert store.buffer("6") is None and hosts(env)[idle]["buffers"] == []


def test_buffers_list_filter_and_show_users_only_their_own(dac, tmp_path):
    _, env, store = dac
    setup(env, tmp_path, 7, "512MiB")  # owned by 1234
    run(
        "dacctl",
        "create-persistent",
        "--name",
        "proj",
        "--capacity",
        "100MiB",
        "--user",
        "5678",
        "--group",
        "8765",
        env=env,
    )  # root owns no buffer (min_owner_uid)
    everything = dacctl_json(env, "buffers")["buffers"]
    assert [(b["name"], b["owner_uid"], b["owner"], b["job"], b["state"]) for b in everything] == [
        ("7", UID, str(UID), 7, "created"),
        ("proj", 5678, "5678", None, "created"),
    ]
    assert everything[0]["size"] == 512 << 20 and everything[0]["pool"] == "default"
    assert everything[0]["hosts"] == store.buffer("7").record.allocation.hosts

    def names(*args, user=False):
        r = (
            as_user(env, "buffers", "--json", *args)
            if user
            else run("dacctl", "buffers", "--json", *args, env=env)
        )
        assert r.returncode == 0, r.stderr
        return [b["name"] for b in json.loads(r.stdout)["buffers"]]

    assert names("--user", str(UID)) == ["7"] and names("--user", "5678") == ["proj"]
    assert names("--state", "created") == ["7", "proj"] and names("--state", "mounted") == []
    assert names("--pool", "default") == ["7", "proj"] and names("--pool", "other") == []
    assert names(user=True) == ["7"]  # a user sees their own buffers only
    assert names("--user", "5678", user=True) == []
    table = run("dacctl", "buffers", env=env).stdout.splitlines()
    assert table[0].split() == [
        "NAME",
        "OWNER",
        "JOB",
        "STATE",
        "DESIRED",
        "SIZE",
        "POOL",
        "HOSTS",
        "AGE",
    ]
    assert table[2].split()[:6] == ["proj", "5678", "-", "created", "created", "512MiB"]
    assert (
        one_line(run("dacctl", "buffers", "--user", "no-such-user", env=env, check=False))
        == "dacctl: user error: no user named 'no-such-user' (give a login name or a uid)"
    )

    mine = as_user(env, "show", "7")
    assert mine.returncode == 0 and "owner       1234 (uid 1234, gid 4321)" in mine.stdout
    assert one_line(as_user(env, "show", "proj")) == (
        "dacctl: user error: no buffer 'proj' of yours (a job id or a persistent buffer's name)"
    )


def test_show_prints_the_spec_the_statuses_and_the_error_of_a_failed_stage_in(
    dac, open_dir, tmp_path
):
    _, env, store = dac
    secret = open_dir / "secret"
    secret.write_text("root only")
    secret.chmod(0o600)
    script = setup(
        env,
        tmp_path,
        8,
        "512MiB",
        f"#DW stage_in type=file source={secret} destination=$DW_JOB_STRIPED/s",
    )
    assert slurm(env, "data_in", 8, "--job", str(script), check=False).returncode == 1
    host = store.buffer("8").record.allocation.primary_host

    d = dacctl_json(env, "show", "8")
    assert d["state"] == "error" and d["owner"] == str(UID)
    spec = d["buffer"]
    assert (spec["job_id"], spec["desired_state"], spec["generation"]) == (8, "staged_in", 2)
    assert spec["request"]["stage_in"] == [
        {"type": "file", "source": str(secret), "destination": "$DW_JOB_STRIPED/s"}
    ]
    assert [b["host"] for b in spec["allocation"]["bricks"]] == [host]
    status = d["statuses"][host]
    assert (status["state"], status["generation"]) == ("created", 2)
    assert status["error"]["category"] == "user"
    assert status["error"]["message"] == f"stage_in failed: {secret}: Permission denied"

    text = run("dacctl", "show", "8", env=env).stdout
    assert "state       error, desired staged_in, generation 2" in text
    assert f"stage_in    file {secret} -> $DW_JOB_STRIPED/s" in text
    assert f"allocation  512MiB in 1 brick, primary {host}" in text
    assert (
        f"{host}: user error (generation 2): stage_in failed: {secret}: Permission denied" in text
    )
    assert one_line(run("dacctl", "show", "nope", env=env, check=False)).startswith(
        "dacctl: user error: no buffer 'nope' of yours"
    )


def test_create_and_destroy_persistent_buffers_end_to_end(dac, tmp_path):
    workdir, env, store = dac
    # at most a quarter of the 2 GiB pool per owner (persistent_caps.user_share's default)
    out = run(
        "dacctl",
        "create-persistent",
        "--name",
        "proj1",
        "--capacity",
        "500MiB",
        "--user",
        "5678",
        "--group",
        "8765",
        env=env,
    ).stdout
    rec = store.buffer("proj1").record
    (host,) = rec.allocation.hosts
    assert out == f"created persistent buffer proj1: 512MiB in pool default on {host}\n"
    assert rec.persistent and (rec.owner_uid, rec.owner_gid) == (5678, 8765)
    assert mount_of(workdir / "fs" / host / "proj1" / "mnt")  # dacd built it before dacctl returned
    assert store.statuses("proj1")[host].state.value == "created"

    run(
        "dacctl",
        "create-persistent",
        "--name",
        "theirs",
        "--capacity",
        "1MiB",
        "--user",
        "4444",
        "--group",
        "4444",
        env=env,
    )
    assert (store.buffer("theirs").record.owner_uid, store.buffer("theirs").record.owner_gid) == (
        4444,
        4444,
    )
    mine = as_user(env, "create-persistent", "--name", "mine", "--capacity", "1MiB")
    assert mine.returncode == 0 and mine.stdout.startswith("created persistent buffer mine:")
    assert (store.buffer("mine").record.owner_uid, store.buffer("mine").record.owner_gid) == (
        UID,
        GID,
    )
    assert pools(env)["default"]["free_bricks"] == 1

    refusals = [
        (
            as_user(
                env,
                "create-persistent",
                "--name",
                "x",
                "--capacity",
                "1MiB",
                "--user",
                "0",
                "--group",
                "0",
            ),
            "only root or the admin group may create a buffer for another user (--user, --group)",
        ),
        (
            run(
                "dacctl",
                "create-persistent",
                "--name",
                "x",
                "--capacity",
                "1MiB",
                "--user",
                "5",
                env=env,
                check=False,
            ),
            "give --user and --group together (the buffer's owner and group)",
        ),
        # root owns no buffer unless the config's min_owner_uid is 0 (docs/security.md)
        (
            run(
                "dacctl",
                "create-persistent",
                "--name",
                "x",
                "--capacity",
                "1MiB",
                env=env,
                check=False,
            ),
            "owner uid 0 is below min_owner_uid 1000: a buffer belongs to an ordinary user and "
            "group",
        ),
        (
            run(
                "dacctl",
                "create-persistent",
                "--name",
                "9lives",
                "--capacity",
                "1MiB",
                env=env,
                check=False,
            ),
            "create-persistent: name '9lives' must start with a letter and contain only letters, "
            "digits, _ . -",
        ),
        (
            run(
                "dacctl",
                "create-persistent",
                "--name",
                "mine",
                "--capacity",
                "1MiB",
                env=env,
                check=False,
            ),
            "buffer 'mine' already exists",
        ),
        (
            run(
                "dacctl",
                "create-persistent",
                "--name",
                "p",
                "--capacity",
                "1MiB",
                "--access",
                "private",
                "--user",
                str(UID),
                "--group",
                str(GID),
                env=env,
                check=False,
            ),
            "create_persistent: access 'private': persistent buffers are striped (every attaching "
            "job sees one directory)",
        ),
        (as_user(env, "destroy-persistent", "proj1"), "no persistent buffer 'proj1' of yours"),
    ]
    for r, message in refusals:
        assert one_line(r) == f"dacctl: user error: {message}"
    assert store.buffer("proj1") is not None

    assert as_user(env, "destroy-persistent", "mine").stdout == "destroyed persistent buffer mine\n"
    assert (
        run("dacctl", "destroy-persistent", "proj1", "--hurry", env=env).stdout
        == "destroyed persistent buffer proj1\n"
    )
    assert store.buffer("proj1") is None and store.buffer("mine") is None
    assert not mount_of(workdir / "fs" / host / "proj1" / "mnt")
    assert pools(env)["default"]["free_bricks"] == 3  # only "theirs" holds a brick

    setup(env, tmp_path, 9, "512MiB")
    assert (
        one_line(run("dacctl", "destroy-persistent", "9", env=env, check=False))
        == "dacctl: user error: buffer '9' belongs to job 9 and goes when the job ends (scancel 9)"
    )


def test_estimate_measures_a_tree_as_the_user_and_names_what_they_cannot_read(dac, open_dir):
    workdir, env, store = dac
    data = open_dir / "data"
    (data / "sub").mkdir(parents=True)
    (data / "a").write_bytes(os.urandom(300 << 20))
    (data / "sub" / "b").write_bytes(b"b" * 1000)
    (data / "sub" / "link").symlink_to("../a")
    with open(data / "sparse", "wb") as f:
        f.truncate(100 << 20)
    script = open_dir / "job.sh"
    script.write_text(
        "#!/bin/sh\n#DW jobdw capacity=512MiB access_mode=striped pool=default\n"
        f"#DW stage_in type=directory source={data} "
        "destination=$DW_JOB_STRIPED/in\n"
    )
    script.chmod(0o644)
    as_root = dacctl_json(env, "estimate", str(script))
    (line,) = as_root["stage_in"]
    assert line["bytes"] == (300 << 20) + 1000 + (100 << 20) == as_root["bytes"]
    assert line["allocated_bytes"] < (310 << 20)  # the sparse file takes no blocks
    assert (line["files"], line["dirs"], line["links"], as_root["inodes"]) == (3, 2, 1, 6)
    assert (as_root["pool"], as_root["granularity"]) == ("default", 512 << 20)
    # 400 MiB + 25% = 500 MiB: one brick of 512 MiB, what the script asks for
    assert (as_root["bricks"], as_root["suggestion"], as_root["verdict"]) == (1, "512MiB", "enough")
    more = run(
        "dacctl", "estimate", "--output", "200MiB", "--margin", "10%", str(script), env=env
    ).stdout
    assert (
        "advice: capacity=1GiB (600MiB plus 10% margin = 660MiB; pool default, bricks of "
        "512MiB)" in more
    )
    assert "the script's jobdw capacity=512MiB (allocated as 512MiB): too small" in more

    secret = data / "sub" / "secret"
    secret.write_text("root only")
    secret.chmod(0o600)
    r = as_user(env, "estimate", str(script))
    assert "stage-in into the job buffer: 400MiB" in r.stdout  # the figures still come
    assert one_line(r) == (
        f"dacctl: user error: line 3: stage_in: {secret}: not readable (as "
        f"uid {UID}; the stage-in runs as you and would fail)"
    )

    # etcd down: the raw figures, the pool unknown, not rounded to its bricks
    unreachable = workdir / "unreachable.yaml"
    unreachable.write_text(
        "etcd:\n  endpoints: [http://127.0.0.1:9]\n  timeout: 0.5\n"
        f"  credentials_dir: {workdir / 'etcd' / 'credentials'}\n"
    )
    offline = run(
        "dacctl",
        "estimate",
        str(script),
        env={"DAC_CONFIG": str(unreachable), "DAC_ETCD_ENDPOINTS": ""},
    ).stdout
    assert (
        "advice: capacity=501MiB (400MiB plus 25% margin = 500MiB; pool unknown (etcd "
        "unreachable at http://127.0.0.1:9" in offline
    )


def test_the_admin_group_acts_as_root_in_dacctl(dac, tmp_path):
    import grp

    import yaml

    workdir, env, store = dac
    try:
        gid = grp.getgrnam("dacadmins").gr_gid
    except KeyError:
        subprocess.run(["groupadd", "dacadmins"], check=True)
        gid = grp.getgrnam("dacadmins").gr_gid
    setup(env, tmp_path, 9, "512MiB")  # owned by uid 1234 (clitools.setup), not by 5555
    host = store.buffer("9").record.allocation.primary_host
    assert (
        one_line(as_user(env, "show", "9", uid=5555, gid=5555))
        == "dacctl: user error: no buffer '9' of yours (a job id or a persistent buffer's name)"
    )
    config = workdir / "dac.yaml"
    data = yaml.safe_load(config.read_text())
    config.write_text(yaml.safe_dump({**data, "admin_group": "dacadmins"}))
    # as a site does with admin_group: its members may read the admin etcd credential and the
    # client key (docs/security.md, "What a site must set up")
    etcd_dir = workdir / "etcd"
    for secret in (etcd_dir / "credentials" / "admin", etcd_dir / "pki" / "client.key"):
        os.chown(secret, 0, gid)
        secret.chmod(0o640)
    # a member (by a supplementary group) sees every buffer and may drain; others still not
    r = as_user(env, "show", "9", "--json", uid=5555, gid=5555, groups=(gid,))
    assert r.returncode == 0 and json.loads(r.stdout)["buffer"]["owner_uid"] == UID, r.stderr
    assert as_user(env, "drain", host, uid=5555, gid=5555, groups=(gid,)).returncode == 0
    assert hosts(env)[host]["state"] == "drained"
    assert (
        one_line(as_user(env, "undrain", host, uid=5555, gid=5555))
        == "dacctl: user error: only root or the admin group may undrain hosts"
    )
    assert as_user(env, "undrain", host, uid=5555, gid=5555, groups=(gid,)).returncode == 0
