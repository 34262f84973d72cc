"""The ssh settings: defaults a site can keep, and bounds that hold together."""

import pytest

from daccore.settings.config import DacConfig, SshSettings


def test_ssh_defaults_check_host_keys_and_give_up_on_a_silent_host_within_60s():
    ssh = DacConfig().ssh
    assert ssh.strict_host_keys and ssh.known_hosts == "/etc/dac/ssh_known_hosts"
    assert ssh.unreachable_timeout == 60
    assert max(ssh.connect_timeout, ssh.alive_interval * ssh.alive_count) < 60


def test_ssh_an_unreachable_bound_shorter_than_finding_a_host_unreachable_is_refused():
    with pytest.raises(
        ValueError,
        match=r"unreachable_timeout: 20 s is not more than the 30 s "
        r"it takes to find a host unreachable",
    ):
        SshSettings(alive_interval=10, alive_count=3, unreachable_timeout=20)


def test_ssh_an_unreachable_bound_beyond_slurms_wait_is_refused():
    with pytest.raises(
        ValueError,
        match=r"ssh.unreachable_timeout: 300 s must be less than "
        r"step_timeout \(270 s\)",
    ):
        DacConfig.model_validate({"ssh": {"unreachable_timeout": 300}})
