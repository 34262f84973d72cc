"""What dacd tells Ansible about ssh, what an unreachable host's line says, and what a failed
step leaves recorded as attached."""

import shlex
from typing import Any

from daccore.errors import HostsUnreachable, Kind, PlaybookFailed
from daccore.settings.config import SshSettings
from dacd.reconcile.step import may_be_attached
from dacd.runner import _hosts, ssh_environment


def test_ssh_environment_turns_host_key_checking_on_with_the_admins_known_hosts():
    env = ssh_environment(SshSettings(known_hosts="/etc/dac/kh"))
    args = shlex.split(env["ANSIBLE_SSH_ARGS"])
    # ansible-runner sets ANSIBLE_HOST_KEY_CHECKING=False unless it is given
    assert env["ANSIBLE_HOST_KEY_CHECKING"] == "True"
    for option in (
        "StrictHostKeyChecking=yes",
        "UserKnownHostsFile=/etc/dac/kh",
        "ServerAliveInterval=5",
        "ServerAliveCountMax=3",
        "ConnectTimeout=10",
        "BatchMode=yes",
        "ControlMaster=auto",
    ):
        assert option in args
    assert env["ANSIBLE_TIMEOUT"] == "10" and env["ANSIBLE_TASK_TIMEOUT"] == "900"


def test_ssh_environment_is_the_same_for_every_run_of_a_dacd():
    # the warm Ansible server runs a request warm only if its ANSIBLE_* variables match
    assert ssh_environment(SshSettings()) == ssh_environment(SshSettings())


def test_unreachable_hosts_are_one_admin_line_naming_them_and_the_remedy():
    e = HostsUnreachable(
        "mount",
        "dac1",
        {
            "node2": "Task failed: Failed to connect to the host via ssh: ssh: connect to host "
            "10.0.0.2 port 22: Connection timed out",
            "node1": 'Data could not be sent to remote host "10.0.0.1". Make sure this host can '
            "be reached over ssh: \nbanner exchange: Connection to 10.0.0.1 port 22: "
            "Connection timed out",
        },
        "/etc/dac/kh",
    )
    assert str(e) == (
        "mount failed on dac1: node1, node2 unreachable over ssh (banner exchange: Connection "
        "to 10.0.0.1 port 22: Connection timed out); an admin must bring node1, node2 back, "
        "or take them out of service (a compute node: scontrol update nodename=<node> "
        "state=down)"
    )
    assert e.kind is Kind.ADMIN and e.hosts == ["node1", "node2"]
    assert "node2: Task failed" in e.output


def test_a_refused_host_key_is_the_admins_to_check_and_list():
    e = HostsUnreachable(
        "create",
        "dac1",
        {
            "dac2": "@@@\nWARNING: REMOTE HOST IDENTIFICATION "
            "HAS CHANGED!\nHost key verification "
            "failed."
        },
        "/etc/dac/kh",
    )
    assert str(e) == (
        "create failed on dac1: dac2 unreachable over ssh (Host key verification "
        "failed.); an admin must check dac2 and put its current host key in "
        "/etc/dac/kh (docs/admin.md, 'Host keys')"
    )


def test_a_failed_mount_records_every_node_that_may_have_mounted():
    e = HostsUnreachable(
        "mount",
        "dac1",
        {"n3": "timed out", "n4": "timed out"},
        "/kh",
        touched=frozenset({"dac1", "n1", "n2", "n4"}),
    )
    # n3 never answered: it ran nothing; n4 answered, then went silent: it may have mounted
    assert may_be_attached({}, {"7": ["n1", "n2", "n3", "n4"]}, e) == {"7": ["n1", "n2", "n4"]}


def test_a_failed_unmount_keeps_what_was_mounted():
    e = HostsUnreachable(
        "unmount", "dac1", {"n2": "timed out"}, "/kh", touched=frozenset({"n1", "n2"})
    )
    assert may_be_attached({"7": ["n1", "n2"]}, {}, e) == {"7": ["n1", "n2"]}


def test_a_failed_task_counts_every_node_asked_as_mounted():
    # any other failure (a task failed on a node, the local backend's server): all may have
    assert may_be_attached({"6": ["n9"]}, {"7": ["n1", "n2"]}, RuntimeError("x")) == {
        "6": ["n9"],
        "7": ["n1", "n2"],
    }


def test_an_unreachable_storage_server_is_drained_in_dac_not_in_slurm():
    e = HostsUnreachable(
        "create", "dac1", {"dac2": "timed out"}, "/kh", servers=frozenset({"dac1", "dac2"})
    )
    assert str(e) == (
        "create failed on dac1: dac2 unreachable over ssh (timed out); an admin "
        "must bring dac2 back, or take it out of service (a storage server: "
        "dacctl drain dac2)"
    )
    both = HostsUnreachable(
        "mount", "dac1", {"dac2": "x", "n1": "x"}, "/kh", servers=frozenset({"dac2"})
    )
    assert str(both).endswith(
        "(a storage server: dacctl drain dac2; a compute node: scontrol "
        "update nodename=<node> state=down)"
    )


def test_the_servers_of_an_inventory_are_its_hosts_but_the_clients():
    inventory: dict[str, Any] = {
        "all": {
            "children": {
                "servers": {"hosts": {"dac1": {}, "dac2": {}}},
                "primary": {"hosts": {"dac1": {}}},
                "clients": {"hosts": {"n1": {}}},
            }
        }
    }
    assert _hosts(inventory, clients=False) == {"dac1", "dac2"}
    assert _hosts(inventory, clients=True) == {"n1"} and _hosts(None, False) == frozenset()


def test_a_task_failed_on_a_compute_node_says_how_slurm_takes_it_out():
    e = PlaybookFailed(
        "mount", "mount the job's directories", "n2", 5, "x\nInput/output error", node=True
    )
    assert str(e) == (
        "mount failed on n2 at task 'mount the job's directories' (rc 5): "
        "Input/output error; an admin must fix n2 or take it out of service "
        "(scontrol update nodename=n2 state=down)"
    )
    assert str(PlaybookFailed("create", "t", "dac2", 1, "no space")).endswith("(rc 1): no space")
