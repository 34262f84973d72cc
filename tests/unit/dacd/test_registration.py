"""dacd.registration.exposure: what a dacd reports open to users on its server."""

import os

from daccore.settings.config import HostSettings
from dacd.registration import exposure


def settings(tmp_path, device_mode: int, fs_root: str) -> HostSettings:
    device = tmp_path / "nvme0n1"  # any file stands for a device: only its mode is read
    device.write_bytes(b"")
    device.chmod(device_mode)
    return HostSettings(fs_root=fs_root, bricks=[{"device": str(device), "capacity": "1GiB"}])


def test_exposure_is_empty_for_a_root_only_device_and_a_passable_fs_root(tmp_path):
    root = tmp_path / "fs"
    root.mkdir(mode=0o711)
    root.chmod(0o711)
    assert exposure(settings(tmp_path, 0o600, str(root))) == []


def test_exposure_names_a_readable_device_and_a_listable_fs_root_with_the_fix(tmp_path):
    root = tmp_path / "fs"
    root.mkdir()
    root.chmod(0o755)
    assert exposure(settings(tmp_path, 0o664, str(root))) == [
        f"brick nvme0n1: device {tmp_path}/nvme0n1 is open to every user (mode 0664): make it "
        "0600 or 0660 to a group no user is in",
        f"fs_root {root} can be listed or changed by every user (mode 0755): chmod 0711 it",
    ]


def test_a_missing_fs_root_is_made_root_only_and_passable(tmp_path):
    root = tmp_path / "var" / "fs"
    old = os.umask(0)
    try:
        assert exposure(settings(tmp_path, 0o600, str(root))) == []
    finally:
        os.umask(old)
    assert root.stat().st_mode & 0o777 == 0o711
