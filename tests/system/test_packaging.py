"""What a site installs besides the Python package: the systemd unit and the sample config."""

import subprocess
import sys
from pathlib import Path

import pytest

from daccore.errors import InternalError
from daccore.share import asset

PACKAGING = asset("packaging", directory=True)


def test_the_systemd_unit_verifies_with_systemd(tmp_path):
    # systemd-analyze checks the unit's syntax and that ExecStart runs: point it at this dacd
    unit = (PACKAGING / "dacd.service").read_text().replace(
        "/opt/dac/venv/bin/dacd", str(Path(sys.executable).parent / "dacd"))
    path = tmp_path / "dacd.service"
    path.write_text(unit)
    r = subprocess.run(["systemd-analyze", "verify", str(path)], capture_output=True, text=True)
    assert (r.returncode, r.stdout + r.stderr) == (0, "")
    assert "KillSignal=SIGTERM" in unit and "--config /etc/dac/dac.yaml" in unit


def test_dacd_refuses_the_sample_config_only_for_what_this_machine_lacks(tmp_path):
    # the sample is valid: dacd gets as far as looking for its host entry
    r = subprocess.run([str(Path(sys.executable).parent / "dacd"), "--config",
                        str(PACKAGING / "dac.yaml"), "--host", "nosuchhost"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    assert r.stderr.strip().endswith("hosts.nosuchhost: this host is not in the config "
                                     "(hosts: dac1); pass --host or add it")


def test_a_missing_asset_is_an_internal_error_naming_it():
    with pytest.raises(InternalError, match=r"^dac's daccore/share/playbooks/nfs is missing "
                                            r"from this installation; reinstall dac$"):
        asset("playbooks", "nfs", directory=True)
    with pytest.raises(InternalError, match="daccore/share/slurm/burst_buffer.lua.orig is missing"):
        asset("slurm", "burst_buffer.lua.orig")


def test_a_missing_playbook_never_counts_as_success(tmp_path, monkeypatch):
    from dacd import runner
    (tmp_path / "playbooks" / "local").mkdir(parents=True)
    monkeypatch.setattr(runner, "playbooks", lambda: tmp_path / "playbooks")
    with pytest.raises(InternalError, match=r"^playbook local/create.yml is missing from "):
        runner.run_step("local", "create", "h1", {})


def test_the_installed_playbooks_have_every_step():
    from dacd.runner import playbooks
    for backend in ("local", "lustre", "daos"):
        for step in ("create", "mount", "unmount", "delete"):
            assert (playbooks() / backend / f"{step}.yml").is_file(), (backend, step)
