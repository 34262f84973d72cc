"""What a site installs besides the Python package: the systemd unit and the sample config."""

import subprocess
import sys
from pathlib import Path

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
