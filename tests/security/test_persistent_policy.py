"""Slurm's burst_buffer.conf rules for persistent buffers hold for users' `dacctl
create-persistent` and `destroy-persistent` too (issue 30: with DenyUsers=<user>, Slurm refused
that user's `#BB create_persistent` while dacctl through the user service created 8 buffers).
A local DAC with a real Slurm 22.05 (burst_buffer/lua), its burst_buffer.conf edited as an
admin would, two unprivileged users through the munge-checked user service."""

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from clitools import run
from security.entry_helpers import ALICE, MALLORY, Cluster, dacctl_as


@pytest.fixture(scope="module")
def policy():
    cluster = Cluster("lua")
    conf = cluster.workdir / "slurm" / "etc" / "burst_buffer.conf"
    try:
        yield cluster, conf, conf.read_text()
    finally:
        cluster.close()


def create(cluster, user, name):
    return dacctl_as(
        user,
        "create-persistent",
        "--name",
        name,
        "--capacity",
        "1MiB",
        env=cluster.env,
        timeout=120,
    )


def refused(r) -> str:
    assert r.returncode == 1 and r.stdout == "" and len(r.stderr.splitlines()) == 1, r
    return r.stderr.strip()


def rule(conf: Path, why: str) -> str:
    return (
        f"dacctl: user error: {{}}-persistent: refused by Slurm's burst buffer rules "
        f"({conf}): {why}; an admin decides who may"
    )


def test_enable_persistent_lets_users_make_and_destroy_their_own(policy):
    cluster, conf, original = policy
    assert "Flags=EnablePersistent" in original  # as `dacctl local up` writes it
    r = create(cluster, ALICE, "alice1")
    assert r.returncode == 0, r.stderr
    r = dacctl_as(ALICE, "destroy-persistent", "alice1", env=cluster.env, timeout=120)
    assert r.returncode == 0, r.stderr


def test_deny_and_allow_users_hold_for_dacctl(policy):
    cluster, conf, original = policy
    try:
        conf.write_text(original + f"DenyUsers=nobody,{MALLORY[0]}\n")
        assert refused(create(cluster, MALLORY, "mal1")) == rule(
            conf, f"uid {MALLORY[0]} is in DenyUsers"
        ).format("create")
        r = create(cluster, ALICE, "alice2")
        assert r.returncode == 0, r.stderr
        conf.write_text(original + f"AllowUsers={ALICE[0]}\n")
        assert refused(create(cluster, MALLORY, "mal2")) == rule(
            conf, f"uid {MALLORY[0]} is not in AllowUsers"
        ).format("create")
        assert not cluster.buffer_exists("mal1") and not cluster.buffer_exists("mal2")
    finally:
        conf.write_text(original)
    r = dacctl_as(ALICE, "destroy-persistent", "alice2", env=cluster.env, timeout=120)
    assert r.returncode == 0, r.stderr


def test_without_enable_persistent_only_root_and_admins_may(policy):
    cluster, conf, original = policy
    r = create(cluster, ALICE, "alice3")
    assert r.returncode == 0, r.stderr
    for flags in ("", "Flags=DisablePersistent\n"):
        try:
            conf.write_text(original.replace("Flags=EnablePersistent,TeardownFailure\n", flags))
            why = (
                "only root, SlurmUser and the admin group may (Flags has "
                f"{'DisablePersistent' if flags else 'no EnablePersistent'})"
            )
            assert refused(create(cluster, ALICE, "alice4")) == rule(conf, why).format("create")
            r = dacctl_as(ALICE, "destroy-persistent", "alice3", env=cluster.env)
            assert refused(r) == rule(conf, why).format("destroy")
            assert cluster.buffer_exists("alice3") and not cluster.buffer_exists("alice4")
            # root is privileged, as in Slurm (for a third owner: ALICE holds her quarter)
            run(
                "dacctl",
                "create-persistent",
                "--name",
                "rootmade",
                "--capacity",
                "1MiB",
                "--user",
                "4444",
                "--group",
                "4444",
                env=cluster.env,
                timeout=120,
            )
            run("dacctl", "destroy-persistent", "rootmade", env=cluster.env, timeout=120)
        finally:
            conf.write_text(original)
    r = dacctl_as(ALICE, "destroy-persistent", "alice3", env=cluster.env, timeout=120)
    assert r.returncode == 0, r.stderr


def test_one_user_holds_at_most_a_quarter_of_the_pool(policy):
    """The pool holds 2 GiB (4 bricks of 512 MiB): a quarter is one brick. Ten creates of
    ALICE's at once make one buffer; the rest are refused in one line; MALLORY still finds
    room."""
    cluster, conf, _ = policy
    with ThreadPoolExecutor(10) as pool:
        results = list(pool.map(lambda i: create(cluster, ALICE, f"q{i}"), range(10)))
    made = [r for r in results if r.returncode == 0]
    assert len(made) == 1, [r.stderr for r in results]
    assert {refused(r) for r in results if r.returncode} == {
        "dacctl: user error: create_persistent: uid 1234's persistent buffers in pool "
        "'default' would hold 1GiB of its 2GiB; one user may hold 25% (512MiB; "
        "persistent_caps.user_share in dac.yaml): destroy one first, or ask an admin"
    }
    r = create(cluster, MALLORY, "theirs")
    assert r.returncode == 0, r.stderr
    name = made[0].stdout.split(":")[0].rsplit(" ", 1)[1]
    for user, buffer in ((ALICE, name), (MALLORY, "theirs")):
        r = dacctl_as(user, "destroy-persistent", buffer, env=cluster.env, timeout=120)
        assert r.returncode == 0, r.stderr
