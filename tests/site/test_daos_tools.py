"""The DAOS stand-ins (dmg, daos, dfuse, fusermount3) run as real subprocesses from bin/, as
the playbooks run them: accepted forms change the site's state, refused ones fail the way
DAOS 2.6 does and change nothing, and every call is recorded.
"""

import grp
import json
import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
from leftovers import account

BIN = Path(__file__).resolve().parent / "bin"
HOSTS = {
    "dac1": {"nid": "10.0.0.1@tcp", "ranks": [0, 1]},
    "dac2": {"nid": "10.0.0.2@tcp", "ranks": [2, 3]},
}


@pytest.fixture(scope="module")
def user():
    """The job's user: an unprivileged account (made only when the machine has none)."""
    assert os.geteuid() == 0, "the DAOS stand-in tests switch users with setpriv: run as root"
    return account("dacuser")


@pytest.fixture(scope="module")
def outsider():
    """Another unprivileged user, in none of the job user's groups."""
    return account("nobody")


class Site:
    def __init__(self, root: Path):
        self.root = root
        (root / "site.json").write_text(json.dumps({"hosts": HOSTS}))
        for name, text in (("state.json", "{}"), ("state.lock", ""), ("commands.jsonl", "")):
            (root / name).write_text(text)
            (root / name).chmod(0o666)  # calls run as root and as the job's user

    def run(self, *argv: str, as_user=None, host="dac1") -> subprocess.CompletedProcess:
        cmd = [str(BIN / argv[0]), *argv[1:]]
        if as_user is not None:
            cmd = [
                "setpriv",
                f"--reuid={as_user.pw_uid}",
                f"--regid={as_user.pw_gid}",
                "--init-groups",
                *cmd,
            ]
        env = {
            "PATH": os.environ["PATH"],
            "DAC_SITE_DIR": str(self.root),
            "DAC_SITE_HOST": host,
            "PYTHONDONTWRITEBYTECODE": "1",
        }
        return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=20)

    def ok(self, *argv: str, **kw) -> subprocess.CompletedProcess:
        out = self.run(*argv, **kw)
        assert out.returncode == 0, out.stdout + out.stderr
        return out

    def refused(self, *argv: str, rc: int = 1, **kw) -> str:
        """Run a call that must be refused without touching the state; its stderr."""
        before = self.state()
        out = self.run(*argv, **kw)
        assert out.returncode == rc, out.stdout + out.stderr
        assert self.state() == before
        return out.stderr

    def state(self) -> dict:
        return json.loads((self.root / "state.json").read_text()).get("daos", {})

    def calls(self) -> list[dict]:
        lines = (self.root / "commands.jsonl").read_text().splitlines()
        return [json.loads(line) for line in lines]

    def mount_point(self, name: str, owner, mode=0o700) -> str:
        path = self.root / name
        path.mkdir()
        os.chown(path, owner.pw_uid, owner.pw_gid)
        path.chmod(mode)
        return str(path)


@pytest.fixture
def site():
    """A site directory other users can enter and write (pytest's tmp_path is root-only)."""
    root = Path(tempfile.mkdtemp(prefix="dac-daos-site-"))
    root.chmod(0o777)
    yield Site(root)
    shutil.rmtree(root, ignore_errors=True)


def _group(account) -> str:
    return grp.getgrgid(account.pw_gid).gr_name


def _pool(site: Site, user, label="buf42", ranks="0,1", size="200G"):
    """A pool as create.yml makes it: owned by the user, GROUP@ entry removed."""
    site.ok(
        "dmg",
        "pool",
        "create",
        f"--size={size}",
        f"--ranks={ranks}",
        f"--user={user.pw_name}@",
        f"--group={_group(user)}@",
        label,
    )
    site.ok("dmg", "pool", "delete-acl", "--principal=GROUP@", label)


def _container(site: Site, user, pool="buf42", label="cont"):
    site.ok("daos", "container", "create", "--type=POSIX", pool, label, as_user=user)


# ---------------------------------------------------------------- the playbooks' path


def test_pool_container_dfuse_lifecycle_as_the_playbooks_run_it(site, user):
    out = site.ok(
        "dmg",
        "pool",
        "create",
        "--size=200G",
        "--ranks=0,1",
        f"--user={user.pw_name}@",
        f"--group={_group(user)}@",
        "buf42",
    )
    assert "Pool created with 6.00%,94.00% storage tier ratio" in out.stdout
    pool = site.state()["pools"]["buf42"]
    assert pool["owner"] == f"{user.pw_name}@" and pool["ranks"] == [0, 1]
    assert pool["acl"] == ["A::OWNER@:rw", "A:G:GROUP@:rw"]  # DAOS's default pool ACL

    site.ok("dmg", "pool", "delete-acl", "--principal=GROUP@", "buf42")
    assert site.state()["pools"]["buf42"]["acl"] == ["A::OWNER@:rw"]

    out = site.ok("daos", "container", "create", "--type=POSIX", "buf42", "cont", as_user=user)
    assert "Successfully created container" in out.stdout
    cont = site.state()["pools"]["buf42"]["containers"]["cont"]
    assert (cont["uid"], cont["type"], cont["owner"]) == (user.pw_uid, "POSIX", f"{user.pw_name}@")

    mnt = site.mount_point("staging", user)
    site.ok("dfuse", f"--mountpoint={mnt}", "--pool=buf42", "--container=cont", as_user=user)
    mount = site.state()["dfuse"]["dac1"][mnt]
    assert (mount["pool"], mount["container"], mount["uid"]) == ("buf42", "cont", user.pw_uid)

    site.ok("fusermount3", "-u", mnt, as_user=user)
    assert site.state()["dfuse"]["dac1"] == {}

    out = site.ok("dmg", "pool", "destroy", "--force", "--recursive", "buf42")
    assert out.stdout.strip() == "Pool-destroy command succeeded"
    assert site.state()["pools"] == {}


def test_dmg_json_output_has_the_response_envelope(site, user):
    out = site.ok("dmg", "-j", "pool", "create", "--size=200G", "--ranks=0-3", "buf42")
    doc = json.loads(out.stdout)
    assert doc["error"] is None and doc["status"] == 0
    assert doc["response"]["tgt_ranks"] == [0, 1, 2, 3]
    assert doc["response"]["uuid"] == site.state()["pools"]["buf42"]["uuid"]
    refused = site.run("dmg", "pool", "query", "--json", "nosuch")
    assert json.loads(refused.stdout) == {
        "response": None,
        "status": -1025,
        "error": 'pool query failed: unable to find pool service with label "nosuch"',
    }


def test_commands_jsonl_records_argv_host_uid_and_rc(site, user):
    site.ok("dmg", "system", "query", host="dac2")
    site.run("daos", "container", "create", "nosuch", "c", as_user=user)
    accepted, refused = site.calls()
    assert accepted == {"host": "dac2", "uid": 0, "argv": ["dmg", "system", "query"], "rc": 0}
    assert refused["argv"] == ["daos", "container", "create", "nosuch", "c"]
    assert (refused["host"], refused["uid"], refused["rc"]) == ("dac1", user.pw_uid, 1)
    assert (
        refused["stderr"] == "ERROR: daos: DER_NONEXIST(-1005): The specified entity does not exist"
    )


def test_injected_fault_fails_one_matching_call_once(site, user):
    fault = {"tool": "dmg", "contains": ["create"], "rc": 1, "stderr": "ERROR: dmg: injected"}
    (site.root / "faults.json").write_text(json.dumps([fault]))
    (site.root / "faults.json").chmod(0o666)
    assert site.refused("dmg", "pool", "create", "--size=200G", "buf42") == "ERROR: dmg: injected\n"
    site.ok("dmg", "pool", "create", "--size=200G", "buf42")
    assert json.loads((site.root / "faults.json").read_text()) == []


# ---------------------------------------------------------------- dmg refusals


def test_pool_create_refuses_a_rank_outside_the_system(site):
    err = site.refused("dmg", "pool", "create", "--size=200G", "--ranks=0,7", "buf42")
    assert 'code = 606 description = "pool request contains invalid rank: 7"' in err


@pytest.mark.parametrize(
    "label", ["bad label", "x" * 128, "a/b", "123e4567-e89b-12d3-a456-426614174000"]
)
def test_pool_create_refuses_a_bad_label(site, label):
    err = site.refused("dmg", "pool", "create", "--size=200G", label)
    assert err == f'ERROR: dmg: invalid label "{label}"\n'


@pytest.mark.parametrize(
    "size, message",
    [
        (
            "abc",
            "invalid argument for flag `-z, --size' (expected main.poolSizeFlag): "
            'invalid size "abc"',
        ),
        ("10XB", 'invalid size "10XB"'),
        ("16EiB", 'invalid size "16EiB"'),  # go-humanize v1.0.0 ParseBytes: past a uint64
        ("0%", "invalid full size ratio 0%"),
        ("1G", 'code = 604 description = "requested SCM capacity is too small'),
    ],
)
def test_pool_create_refuses_a_bad_size(site, size, message):
    assert message in site.refused("dmg", "pool", "create", f"--size={size}", "buf42")


def test_pool_create_refuses_conflicting_and_missing_arguments(site):
    assert "--size may not be mixed with --scm-size or --nvme-size" in site.refused(
        "dmg", "pool", "create", "--size=200G", "--scm-size=1G", "buf42"
    )
    assert "the required argument `<pool label>` was not provided" in site.refused(
        "dmg", "pool", "create", "--size=200G"
    )
    assert "unknown flag `label'" in site.refused(
        "dmg", "pool", "create", "--size=200G", "--label=buf42"
    )


def test_pool_create_refuses_a_used_label_and_an_unknown_owner(site, user):
    _pool(site, user)
    assert 'pool label \\"buf42\\" already exists' in site.refused(
        "dmg", "pool", "create", "--size=200G", "buf42"
    )
    assert 'user "nosuchuser@" does not resolve' in site.refused(
        "dmg", "pool", "create", "--size=200G", "--user=nosuchuser", "buf43"
    )


def test_pool_acl_changes_follow_the_ace_grammar(site, user, outsider):
    _pool(site, user)
    assert "Pool-update-ACL command failed: DER_INVAL(-1003)" in site.refused(
        "dmg", "pool", "update-acl", "--entry=A::GROUP@:rw", "buf42"
    )
    assert "Pool-delete-ACL command failed: DER_NONEXIST(-1005)" in site.refused(
        "dmg", "pool", "delete-acl", "--principal=GROUP@", "buf42"
    )
    site.ok("dmg", "pool", "update-acl", f"--entry=A:G:{_group(outsider)}@:r", "buf42")
    site.ok("dmg", "pool", "update-acl", f"--entry=A::{outsider.pw_name}@:rw", "buf42")
    assert site.state()["pools"]["buf42"]["acl"] == [
        "A::OWNER@:rw",
        f"A::{outsider.pw_name}@:rw",
        f"A:G:{_group(outsider)}@:r",
    ]


def test_pool_destroy_needs_recursive_for_containers_and_force_for_mounts(site, user):
    _pool(site, user)
    _container(site, user)
    err = site.refused("dmg", "pool", "destroy", "buf42")
    assert 'code = 618 description = "cannot destroy a pool with existing containers"' in err
    mnt = site.mount_point("m", user)
    site.ok("dfuse", "-m", mnt, "--pool", "buf42", "--cont", "cont", as_user=user)
    assert "pool destroy failed: DER_BUSY(-1012)" in site.refused(
        "dmg", "pool", "destroy", "--recursive", "buf42"
    )
    site.ok("dmg", "pool", "destroy", "--recursive", "--force", "buf42")


def test_pool_destroy_of_an_unknown_pool_says_so_as_dmg_does(site):
    out = site.run("dmg", "pool", "destroy", "--force", "--recursive", "gone")
    assert out.returncode == 1
    assert (
        out.stderr == "ERROR: dmg: pool destroy failed: unable to find pool service "
        'with label "gone"\n'
    )


# ---------------------------------------------------------------- daos refusals


def test_container_create_refuses_a_user_the_pool_acl_does_not_admit(site, user, outsider):
    _pool(site, user)
    assert "DER_NO_PERM(-1001)" in site.refused(
        "daos", "container", "create", "--type=POSIX", "buf42", "c", as_user=outsider
    )
    site.ok("dmg", "pool", "update-acl", f"--entry=A:G:{_group(outsider)}@:rw", "buf42")
    site.ok("daos", "container", "create", "--type=POSIX", "buf42", "c", as_user=outsider)


def test_container_create_refuses_a_used_label_a_bad_label_and_a_bad_type(site, user):
    _pool(site, user)
    _container(site, user)
    assert "failed to create container: DER_EXIST(-1004)" in site.refused(
        "daos", "container", "create", "--type=POSIX", "buf42", "cont", as_user=user
    )
    assert 'invalid label "a b"' in site.refused(
        "daos", "container", "create", "--type=POSIX", "buf42", "a b", as_user=user
    )
    assert 'unknown container type "ext4"' in site.refused(
        "daos", "container", "create", "--type=ext4", "buf42", "c2", as_user=user
    )


def test_container_destroy_needs_delete_rights_and_no_open_mount(site, user, outsider):
    _pool(site, user)
    _container(site, user)
    out = site.ok("daos", "container", "list", "buf42", as_user=user)
    assert out.stdout.splitlines()[-1].endswith(" cont")
    assert (
        site.refused("daos", "container", "destroy", "buf42", "cont", as_user=outsider)
        == "ERROR: daos: DER_NO_PERM(-1001): Operation not permitted\n"
    )  # not even a connect
    site.ok("dmg", "pool", "update-acl", f"--entry=A::{outsider.pw_name}@:r", "buf42")
    assert "failed to destroy container cont: DER_NO_PERM(-1001)" in site.refused(
        "daos", "container", "destroy", "buf42", "cont", as_user=outsider
    )
    site.ok("dfuse", site.mount_point("m", user), "buf42", "cont", as_user=user)
    assert "failed to destroy container cont: DER_BUSY(-1012)" in site.refused(
        "daos", "container", "destroy", "buf42", "cont", as_user=user
    )
    site.ok("daos", "container", "destroy", "--force", "buf42", "cont", as_user=user)
    assert site.state()["pools"]["buf42"]["containers"] == {}


# ---------------------------------------------------------------- dfuse and fusermount3


def test_dfuse_refuses_short_pool_options_and_a_missing_mount_point(site, user):
    _pool(site, user)
    _container(site, user)
    mnt = site.mount_point("m", user)
    assert (
        site.refused("dfuse", "-m", mnt, "-p", "buf42", "-c", "cont", rc=3, as_user=user)
        == "dfuse: invalid option -- 'p'\n"
    )
    out = site.run(
        "dfuse",
        "--mountpoint",
        str(site.root / "nodir"),
        "--pool",
        "buf42",
        "--container",
        "cont",
        as_user=user,
    )
    assert out.returncode == 5
    assert out.stdout == "Mount point does not exist\nExiting -1005 DER_NONEXIST\n"


def test_dfuse_refuses_what_the_caller_may_not_reach(site, user, outsider):
    _pool(site, user)
    _container(site, user)
    theirs = site.mount_point("theirs", outsider)
    assert "Failed to connect to pool: 1 (Operation not permitted)" in site.refused(
        "dfuse", theirs, "buf42", "cont", as_user=outsider
    )
    assert "Failed to connect to container: 2 (No such file or directory)" in site.refused(
        "dfuse", site.mount_point("m", user), "buf42", "nocont", rc=5, as_user=user
    )
    root_owned = site.mount_point("root", pwd.getpwuid(0), mode=0o755)
    assert "user has no write access to mountpoint" in site.refused(
        "dfuse", root_owned, "buf42", "cont", rc=3, as_user=user
    )


def test_dfuse_mounts_over_a_non_empty_directory_but_not_over_its_own_mount(site, user):
    _pool(site, user)
    _container(site, user)
    mnt = site.mount_point("m", user)
    Path(mnt, "leftover").write_text("x")  # FUSE 3 mounts over non-empty directories
    site.ok("dfuse", mnt, "buf42", "cont", as_user=user)
    assert "Pool specified multiple ways" in site.refused(
        "dfuse", mnt, "buf42", "cont", rc=3, as_user=user
    )


def test_fusermount3_refuses_a_non_mount_and_someone_elses_mount(site, user, outsider):
    _pool(site, user)
    _container(site, user)
    mnt = site.mount_point("m", user)
    assert (
        site.refused("fusermount3", "-u", mnt, as_user=user)
        == f"fusermount3: entry for {mnt} not found in /etc/mtab\n"
    )
    site.ok("dfuse", mnt, "buf42", "cont", as_user=user)
    assert "not found in /etc/mtab" in site.refused("fusermount3", "-u", mnt, as_user=outsider)
    assert "fusermount3: -z can only be used with -u" in site.refused("fusermount3", "-z", mnt)
    assert (
        site.refused("fusermount3", "-u", str(site.root))
        == f"fusermount3: failed to unmount {site.root}: Invalid argument\n"
    )
    site.ok("fusermount3", "-u", "-z", mnt)  # root may unmount anyone's
    assert site.state()["dfuse"]["dac1"] == {}


def test_fusermount3_refuses_a_mount_a_process_uses_until_lazy(site, user):
    _pool(site, user)
    _container(site, user)
    mnt = site.mount_point("m", user)
    site.ok("dfuse", mnt, "buf42", "cont", as_user=user)
    holder = subprocess.Popen(["sleep", "60"], cwd=mnt, user=user.pw_uid, group=user.pw_gid)
    try:
        assert (
            site.refused("fusermount3", "-u", mnt, as_user=user)
            == f"fusermount3: failed to unmount {mnt}: Device or resource busy\n"
        )
        assert mnt in site.state()["dfuse"]["dac1"]
        site.ok("fusermount3", "-u", "-z", mnt, as_user=user)
        assert site.state()["dfuse"]["dac1"] == {}
    finally:
        holder.kill()
        holder.wait()


def test_dfuse_and_fusermount3_pass_a_root_directory_only_with_the_users_acl(site, user):
    """The playbooks' job directory: root's, 0700, an ACL entry letting the user pass
    (setfacl, daccore.backends.lustre.passable_to). dfuse resolves its mount point and
    fusermount3 chdirs into it, and -u to its parent, with the user's own rights: with the
    entry both work; with the mask cleared (a chmod) both are refused as the real tools
    refuse them, and nothing changes."""
    _pool(site, user)
    _container(site, user)
    job = site.root / "7"
    job.mkdir(0o700)
    mnt = site.mount_point("7/striped", user)
    assert "Error resolving mount point: 13 (Permission denied)" in site.refused(
        "dfuse", mnt, "buf42", "cont", as_user=user
    )
    site.ok("setfacl", "--set", f"u::rwx,u:{user.pw_uid}:--x,g::---,o::---", str(job))
    site.ok("dfuse", mnt, "buf42", "cont", as_user=user)
    job.chmod(0o700)  # the mask (the group bits) ---: the user's entry counts for nothing
    assert (
        site.refused("fusermount3", "-u", mnt, as_user=user)
        == f"fusermount3: failed to chdir to {job}: Permission denied\n"
    )
    assert mnt in site.state()["dfuse"]["dac1"]
    job.chmod(0o710)
    site.ok("fusermount3", "-u", mnt, as_user=user)
    assert site.state()["dfuse"]["dac1"] == {}
