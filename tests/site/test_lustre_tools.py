"""The Lustre-side stand-ins (lustre_tools.py and the modules it registers), run the way the
playbooks run them: bin/<tool> as a real subprocess, on a site of two hosts with placeholder
devices. One test walks the whole life of a filesystem; the rest check one rule each, on a copy
of a running filesystem, and that a refusal leaves the site's state untouched."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

BIN = Path(__file__).resolve().parent / "bin"
MGS = "10.0.0.1@tcp"
OPTS = "flock,nodev,nosuid"
#: every rule is checked on every release the stand-ins follow (lustre_model.RELEASES)
RELEASES = ("2.15", "2.16", "master")


class Site:
    """A recorded-command site in a directory: hosts dac1 and dac2, two disks each."""

    def __init__(self, root: Path, release: str = "2.15"):
        self.root, self.release = root, release
        root.mkdir()
        hosts = {"dac1": {"nid": MGS}, "dac2": {"nid": "10.0.0.2@tcp"}}
        (root / "site.json").write_text(
            json.dumps({"hosts": hosts, "lustre": {"release": release}})
        )
        for host in hosts:
            (root / host / "dev").mkdir(parents=True)
            for disk in ("nvme0n1", "nvme1n1"):
                (root / host / "dev" / disk).touch()
        for d in (
            "targets/mdt0",
            "targets/ost0",
            "targets/mdt1",
            "targets/ost1",
            "targets/spare",
            "dac1/fs",
            "node/striped",
        ):
            (root / d).mkdir(parents=True)

    def dev(self, host: str, name: str) -> str:
        return str(self.root / host / "dev" / name)

    def path(self, *parts: str) -> str:
        return str(self.root.joinpath(*parts))

    def run(self, host: str, *argv: str) -> subprocess.CompletedProcess:
        env = {**os.environ, "DAC_SITE_DIR": str(self.root), "DAC_SITE_HOST": host}
        return subprocess.run(
            [str(BIN / argv[0]), *argv[1:]], env=env, capture_output=True, text=True
        )

    def ok(self, host: str, *argv: str) -> subprocess.CompletedProcess:
        done = self.run(host, *argv)
        assert done.returncode == 0, (argv, done.stderr)
        return done

    def state(self) -> dict:
        path = self.root / "state.json"
        return json.loads(path.read_text()) if path.exists() else {}

    def calls(self) -> list[dict]:
        return [
            json.loads(line) for line in (self.root / "commands.jsonl").read_text().splitlines()
        ]


def bring_up(s: Site) -> None:
    """Partition, format (MGS+MDT0, MDT1, two OSTs), start the targets, mount the root client."""
    d1, d2 = s.dev("dac1", "nvme0n1"), s.dev("dac2", "nvme0n1")
    s.ok(
        "dac1",
        "parted",
        "--script",
        d1,
        "mklabel",
        "gpt",
        "mkpart",
        "mdt",
        "1MiB",
        "10241MiB",
        "mkpart",
        "ost",
        "10241MiB",
        "100%",
    )
    s.ok(
        "dac2",
        "parted",
        "--script",
        d2,
        "mklabel",
        "gpt",
        "mkpart",
        "mdt",
        "1MiB",
        "10241MiB",
        "mkpart",
        "ost",
        "10241MiB",
        "100%",
    )
    s.ok("dac1", "udevadm", "settle", "--timeout=30")
    s.ok(
        "dac1",
        "mkfs.lustre",
        "--mgs",
        "--mdt",
        "--reformat",
        "--fsname=fs1",
        "--index=0",
        f"{d1}p1",
    )
    s.ok(
        "dac2",
        "mkfs.lustre",
        "--mdt",
        "--reformat",
        "--fsname=fs1",
        "--index=1",
        f"--mgsnode={MGS}",
        f"{d2}p1",
    )
    for host, disk, index in (("dac1", d1, 0), ("dac2", d2, 1)):
        s.ok(
            host,
            "mkfs.lustre",
            "--ost",
            "--reformat",
            "--fsname=fs1",
            f"--index={index}",
            f"--mgsnode={MGS}",
            f"{disk}p2",
        )
    s.ok("dac1", "mount", "-t", "lustre", f"{d1}p1", s.path("targets", "mdt0"))
    s.ok("dac2", "mount", "-t", "lustre", f"{d2}p1", s.path("targets", "mdt1"))
    s.ok("dac1", "mount", "-t", "lustre", f"{d1}p2", s.path("targets", "ost0"))
    s.ok("dac2", "mount", "-t", "lustre", f"{d2}p2", s.path("targets", "ost1"))
    s.ok("dac1", "mount", "-t", "lustre", "-o", OPTS, f"{MGS}:/fs1", s.path("dac1", "fs"))
    (s.root / "dac1" / "fs" / "striped").mkdir()


@pytest.fixture(scope="module")
def templates(tmp_path_factory):
    """Per release, a site with fs1 running, built once; tests get it back fresh from a copy."""
    built: dict[str, Site] = {}

    def template(release: str) -> Site:
        if release not in built:
            root = tmp_path_factory.mktemp(f"lustre-{release}") / "site"
            built[release] = Site(root, release)
            bring_up(built[release])
            shutil.copytree(root, root.with_name("snapshot"), symlinks=True)
        return built[release]

    return template


def restore(template: Site) -> Site:
    shutil.rmtree(template.root)
    shutil.copytree(template.root.with_name("snapshot"), template.root, symlinks=True)
    return template


@pytest.fixture(params=RELEASES)
def site(templates, request):
    return restore(templates(request.param))


@pytest.fixture(params=RELEASES)
def blank(tmp_path, request):
    return Site(tmp_path / "site", request.param)


def test_a_filesystem_lives_through_partition_format_mount_use_and_wipe(site):
    s, d1, d2 = site, site.dev("dac1", "nvme0n1"), site.dev("dac2", "nvme0n1")
    state = s.state()
    assert [(p["number"], p["name"]) for p in state["devices"]["dac1"][d1]["parts"]] == [
        (1, "mdt"),
        (2, "ost"),
    ]
    mdt0 = state["devices"]["dac1"][f"{d1}p1"]["fs"]["lustre"]
    assert (mdt0["kinds"], mdt0["fsname"], mdt0["index"]) == (["mgs", "mdt"], "fs1", 0)
    ost1 = state["devices"]["dac2"][f"{d2}p2"]["fs"]["lustre"]
    assert (ost1["svname"], ost1["mgsnode"]) == ("fs1-OST0001", [[MGS]])
    assert sorted(mdt0["mgs_db"]["fs1"]) == [
        "fs1-MDT0000",
        "fs1-MDT0001",
        "fs1-OST0000",
        "fs1-OST0001",
    ]

    s.ok(
        "dac2",
        "mount",
        "-t",
        "lustre",
        "-o",
        OPTS,
        f"{MGS}:/fs1/striped",
        s.path("node", "striped"),
    )
    s.ok("dac1", "lfs", "setstripe", "-c", "-1", s.path("dac1", "fs", "striped"))
    s.ok(
        "dac1",
        "lctl",
        "set_param",
        "osc.fs1-*.max_pages_per_rpc=1024",
        "llite.fs1-*.checksum_pages=0",
        "ldlm.namespaces.fs1-*.lru_size=clear",
        "mdc.fs1-*.max_rpcs_in_flight=64",
        "obdfilter.fs1-OST*.brw_size=16",
    )
    s.ok("dac1", "lctl", "set_param", "-P", "osc.fs1-*.max_rpcs_in_flight=32")
    assert "10.0.0.2@tcp" in s.ok("dac1", "lctl", "ping", "10.0.0.2@tcp").stdout
    assert s.ok("dac2", "lctl", "list_nids").stdout == "10.0.0.2@tcp\n"
    state = s.state()
    layout = state["lustre"]["layouts"]["fs1:/striped"]["components"]
    assert layout[0]["stripe_count"] == -1
    assert [p["param"] for p in state["lustre"]["params"]][-1] == "osc.fs1-*.max_rpcs_in_flight"
    assert [(m["kind"], m.get("subdir")) for m in state["mounts"]["dac2"]][-1] == (
        "client",
        "striped",
    )
    striped_in_fs = state["mounts"]["dac2"][-1]["root"]  # the filesystem's own directory

    for host, target in (
        ("dac2", "node/striped"),
        ("dac1", "dac1/fs"),
        ("dac1", "targets/ost0"),
        ("dac2", "targets/ost1"),
        ("dac2", "targets/mdt1"),
    ):
        s.ok(host, "umount", s.path(*target.split("/")))
    # unmounted, the mount point is the empty directory it was; the files stay in the filesystem
    assert os.listdir(s.path("dac1", "fs")) == [] and not os.path.islink(s.path("dac1", "fs"))
    assert os.path.isdir(striped_in_fs)
    s.ok("dac1", "lctl", "erase_lcfg", "fs1")
    s.ok("dac1", "umount", s.path("targets", "mdt0"))
    for host, disk in (("dac1", d1), ("dac2", d2)):
        for part in (f"{disk}p1", f"{disk}p2"):
            s.ok(host, "wipefs", "--all", part)
        s.ok(host, "wipefs", "--all", disk)
    state = s.state()
    assert not any(state["mounts"].values())
    assert state["devices"]["dac1"] == {d1: {"label": None, "parts": [], "fs": None}}
    assert sorted(os.listdir(s.path("dac1", "dev"))) == ["nvme0n1", "nvme1n1"]


def _spare(s: Site) -> str:
    return s.dev("dac1", "nvme1n1")


# rule -> (host, argv, exit status, text the real tool prints); {names} are filled in
REFUSALS = {
    # mkfs.lustre
    "fsname too long": (
        "dac1",
        ["mkfs.lustre", "--ost", "--fsname=fs_long_1", "--index=2", f"--mgsnode={MGS}", "{spare}"],
        1,
        "filesystem name must be 1-8 chars",
    ),
    "fsname bad char": (
        "dac1",
        ["mkfs.lustre", "--ost", "--fsname=fs.1", "--index=2", f"--mgsnode={MGS}", "{spare}"],
        1,
        "char '.' not allowed in filesystem name",
    ),
    "ost without mgsnode": (
        "dac1",
        ["mkfs.lustre", "--ost", "--fsname=fs1", "--index=2", "{spare}"],
        22,
        "FATAL: Must specify --mgsnode",
    ),
    "mdt without mgs or mgsnode": (
        "dac1",
        ["mkfs.lustre", "--mdt", "--fsname=fs1", "--index=2", "{spare}"],
        22,
        "Must specify --mgs or --mgsnode",
    ),
    "no target type": (
        "dac1",
        ["mkfs.lustre", "--fsname=fs1", "{spare}"],
        22,
        "must set target type: MDT,OST,MGS",
    ),
    "ost with mdt": (
        "dac1",
        [
            "mkfs.lustre",
            "--ost",
            "--mdt",
            "--fsname=fs1",
            "--index=2",
            f"--mgsnode={MGS}",
            "{spare}",
        ],
        22,
        "OST type is exclusive with MDT,MGS",
    ),
    "index not a number": (
        "dac1",
        ["mkfs.lustre", "--ost", "--fsname=fs1", "--index=two", f"--mgsnode={MGS}", "{spare}"],
        1,
        "must be decimal or hexadecimal",
    ),
    "bad nid net": (
        "dac1",
        ["mkfs.lustre", "--ost", "--fsname=fs1", "--index=2", "--mgsnode=10.0.0.1@tcpx", "{spare}"],
        1,
        "Unsupported NID '10.0.0.1@tcpx'",
    ),
    "loopback nid": (
        "dac1",
        ["mkfs.lustre", "--ost", "--fsname=fs1", "--index=2", "--mgsnode=127.0.0.1@tcp", "{spare}"],
        1,
        "Unsupported NID",
    ),
    "unknown mkfs option": (
        "dac1",
        ["mkfs.lustre", "--ost", "--bogus", "{spare}"],
        22,
        "unrecognized option '--bogus'",
    ),
    "mkfs of a mounted target": (
        "dac1",
        [
            "mkfs.lustre",
            "--ost",
            "--reformat",
            "--fsname=fs1",
            "--index=0",
            f"--mgsnode={MGS}",
            "{d1}p2",
        ],
        17,
        "is currently mounted, exiting without any change",
    ),
    "mkfs of a disk whose partition is mounted": (
        "dac1",
        [
            "mkfs.lustre",
            "--ost",
            "--reformat",
            "--fsname=fs1",
            "--index=2",
            f"--mgsnode={MGS}",
            "{d1}",
        ],
        1,
        "apparently in use by the system",
    ),
    "mkfs of a missing device": (
        "dac1",
        ["mkfs.lustre", "--ost", "--fsname=fs1", "--index=2", f"--mgsnode={MGS}", "{d1}p9"],
        2,
        "apparently does not exist",
    ),
    "index on a standalone mgs writes nothing": (
        "dac1",
        ["mkfs.lustre", "--mgs", "--index=0", "{spare}"],
        0,
        "'--index' only valid for MDT,OST",
    ),
    # mount
    "mount of another fs type": (
        "dac1",
        ["mount", "-t", "xfs", "{spare}", "{spare_dir}"],
        32,
        "only stands in for lustre mounts",
    ),
    "mount without a type": (
        "dac1",
        ["mount", "{spare}", "{spare_dir}"],
        32,
        "only stands in for lustre mounts",
    ),
    "mount point missing": (
        "dac1",
        ["mount", "-t", "lustre", "{d1}p1", "{root}/nowhere"],
        2,
        "cannot resolve: No such file or directory",
    ),
    "unknown client option": (
        "dac1",
        ["mount", "-t", "lustre", "-o", "flock,bogus", f"{MGS}:/fs1", "{spare_dir}"],
        22,
        "Are the mount options correct?",
    ),
    "target already mounted there": (
        "dac1",
        ["mount", "-t", "lustre", "{d1}p2", "{root}/targets/ost0"],
        17,
        "is already mounted on",
    ),
    "target already running": (
        "dac1",
        ["mount", "-t", "lustre", "{d1}p2", "{spare_dir}"],
        114,
        "The target service is already running.",
    ),
    "unformatted target": (
        "dac1",
        ["mount", "-t", "lustre", "{spare}", "{spare_dir}"],
        19,
        "has not been formatted with mkfs.lustre",
    ),
    "client of an unknown fs": (
        "dac1",
        ["mount", "-t", "lustre", "-o", OPTS, f"{MGS}:/nofs", "{spare_dir}"],
        2,
        "Is the filesystem name correct?",
    ),
    "client with no mgs at the nid": (
        "dac1",
        ["mount", "-t", "lustre", "-o", OPTS, "10.0.0.2@tcp:/fs1", "{spare_dir}"],
        5,
        "Is the MGS running?",
    ),
    "client with a bad nid": (
        "dac1",
        ["mount", "-t", "lustre", f"{MGS[:-4]}@ib:/fs1", "{spare_dir}"],
        22,
        "Unsupported NID",
    ),
    "client of a missing subdirectory": (
        "dac1",
        ["mount", "-t", "lustre", "-o", OPTS, f"{MGS}:/fs1/nosuch", "{spare_dir}"],
        2,
        "No such file or directory",
    ),
    # umount
    "umount of what is not mounted": (
        "dac1",
        ["umount", "{spare_dir}"],
        32,
        "umount: {spare_dir}: not mounted.",
    ),
    "umount of a missing path": (
        "dac1",
        ["umount", "{root}/nowhere"],
        32,
        "umount: {root}/nowhere: no mount point specified.",
    ),
    # lctl
    "set_param where the device is not": (
        "dac2",
        ["lctl", "set_param", "osc.fs1-*.max_pages_per_rpc=1024"],
        2,
        "param_path 'osc/fs1-*/max_pages_per_rpc': No such",
    ),
    "set_param of a non-number": (
        "dac1",
        ["lctl", "set_param", "osc.fs1-*.max_pages_per_rpc=x"],
        22,
        "Invalid argument",
    ),
    "set_param out of range": (
        "dac1",
        ["lctl", "set_param", "osc.fs1-*.max_pages_per_rpc=1G"],
        34,
        "Numerical result out of range",
    ),
    "set_param of an unknown type": (
        "dac1",
        ["lctl", "set_param", "foo.fs1-*.bar=1"],
        2,
        "No such file or directory",
    ),
    "set_param -P away from the mgs": (
        "dac2",
        ["lctl", "set_param", "-P", "osc.fs1-*.max_rpcs_in_flight=8"],
        19,
        "This command must be run on the MGS.",
    ),
    "unknown lctl command": ("dac1", ["lctl", "frobnicate"], 1, "is not a valid command"),
    # lfs
    "setstripe outside lustre": (
        "dac1",
        ["lfs", "setstripe", "-c", "-1", "{spare_dir}"],
        25,
        "Inappropriate ioctl for device",
    ),
    "setstripe with no client on this host": (
        "dac2",
        ["lfs", "setstripe", "-c", "-1", "{root}/dac1/fs/striped"],
        25,
        "Inappropriate ioctl for device",
    ),
    "stripe size not a 64KiB multiple": (
        "dac1",
        ["lfs", "setstripe", "-S", "100k", "{root}/dac1/fs/striped"],
        4,
        "invalid stripe size '100k'",
    ),
    "stripe count too large": (
        "dac1",
        ["lfs", "setstripe", "-c", "2001", "{root}/dac1/fs/striped"],
        4,
        "invalid stripe count '2001'",
    ),
    "stripe index of no ost": (
        "dac1",
        ["lfs", "setstripe", "-i", "7", "{root}/dac1/fs/striped"],
        22,
        "Invalid argument",
    ),
    "mdt layout without an end": (
        "dac1",
        ["lfs", "setstripe", "-L", "mdt", "{root}/dac1/fs/striped"],
        22,
        "must be specified with -E",
    ),
    # parted, wipefs, udevadm
    "partition ending before it starts": (
        "dac2",
        ["parted", "--script", "{d2}", "mkpart", "x", "20MiB", "10MiB"],
        1,
        "Can't have the end before the start!",
    ),
    "partition past the end": (
        "dac2",
        ["parted", "--script", "{d2}", "mkpart", "x", "1MiB", "101%"],
        1,
        "is outside of the device",
    ),
    "partition in an unknown unit": (
        "dac2",
        ["parted", "--script", "{d2}", "mkpart", "x", "1XiB", "20MiB"],
        1,
        "not a unit",
    ),
    "partition of an unknown fs type": (
        "dac2",
        ["parted", "--script", "{d2}", "mkpart", "x", "foo", "1MiB", "2MiB"],
        1,
        "Expecting a file system type.",
    ),
    "partition over another": (
        "dac2",
        ["parted", "--script", "{d2}", "mkpart", "x", "5MiB", "6MiB"],
        1,
        "The closest location we can manage is",
    ),
    "mklabel while a partition is mounted": (
        "dac1",
        ["parted", "--script", "{d1}", "mklabel", "gpt"],
        1,
        "are being used.",
    ),
    "wipefs of a mounted partition": (
        "dac1",
        ["wipefs", "--all", "{d1}p1"],
        1,
        "probing initialization failed: Device or resource busy",
    ),
    "wipefs of a disk in use": ("dac1", ["wipefs", "--all", "{d1}"], 1, "Device or resource busy"),
    "wipefs of a missing device": (
        "dac1",
        ["wipefs", "--all", "{d1}p7"],
        1,
        "No such file or directory",
    ),
    "udevadm settle with a bad timeout": (
        "dac1",
        ["udevadm", "settle", "--timeout=soon"],
        1,
        "Failed to parse timeout value 'soon'",
    ),
}


# real grammar the stand-ins must accept without changing anything -> (host, argv, stdout text)
ACCEPTED = {
    "nids of two nodes, a host name and o2ib": (
        "dac1",
        [
            "mkfs.lustre",
            "--dryrun",
            "--ost",
            "--fsname=fs1",
            "--index=3",
            "--mgsnode=10.0.0.1@tcp,10.0.0.2@o2ib1:dac2@tcp",
            "{spare}",
        ],
        "fs1-OST0003",
    ),
    "abbreviated long options and a hex index": (
        "dac1",
        ["mkfs.lustre", "--dry", "--ost", "--fsn=fs1", "--ind=0x1f", f"--mgsn={MGS}", "{spare}"],
        "fs1-OST001f",
    ),
    "short options, net number 0": (
        "dac1",
        ["mkfs.lustre", "-n", "-O", "-L", "fs1", "-i", "7", "-m", "10.0.0.1@tcp0", "{spare}"],
        "fs1-OST0007",
    ),
    "ping by host name and by pid-nid": (
        "dac1",
        ["lctl", "ping", "12345-dac2@tcp"],
        "12345-10.0.0.2@tcp",
    ),
    "listing lustre mounts": ("dac1", ["mount", "-t", "lustre"], f"{MGS}:/fs1 on {{root}}"),
    "listing a mounted partition's signatures": ("dac1", ["wipefs", "{d1}p1"], "ext4"),
    "parted print in sectors": (
        "dac2",
        ["parted", "-s", "-m", "{d2}", "unit", "s", "print"],
        "1:2048s:20973567s:20971520s::mdt:;",
    ),
    "settle with a compound timeout": ("dac1", ["udevadm", "settle", "--timeout=1min 30s"], ""),
}
REFUSALS["ambiguous abbreviation"] = (
    "dac1",
    ["mkfs.lustre", "--m", "{spare}"],
    22,
    "option '--m' is ambiguous",
)

_OST = ["mkfs.lustre", "--ost", "--fsname=fs1", f"--mgsnode={MGS}"]
#: what 2.15 and 2.16 both refuse where master differs
_RELEASED = {
    "erase_lcfg with options of master": (
        "dac1",
        ["lctl", "erase_lcfg", "--quiet", "fs1"],
        4,
        "usage: erase_lcfg <fsname>",
    ),
    "erase_lcfg away from the mgs": (
        "dac2",
        ["lctl", "erase_lcfg", "fs1"],
        1,
        "This command must be run on the MGS.",
    ),
    "erase_lcfg of an unknown fs": (
        "dac1",
        ["lctl", "erase_lcfg", "nofs"],
        1,
        "OBD_IOC_LCFG_ERASE failed: No such file or directory",
    ),
    "device before the options": (
        "dac1",
        ["mkfs.lustre", "{spare}", "--ost", "--fsname=fs1", "--index=7", f"--mgsnode={MGS}"],
        22,
        "usage: mkfs.lustre",
    ),
    "index too large": (
        "dac1",
        [*_OST, "--index=65535", "{spare}"],
        1,
        "Target index must be less than 65535",
    ),
}
#: the rules that differ between releases (sources in lustre_model.py, lustre_mkfs.py,
#: lustre_lctl.py): release -> refusals and accepted forms of that release only
REFUSALS_OF = {
    "2.15": {
        **_RELEASED,
        "ping of an unknown nid": (
            "dac1",
            ["lctl", "ping", "10.0.0.9@tcp"],
            1,
            "failed to ping 10.0.0.9@tcp: Input/output error",
        ),
        "ping with a timeout over 120 s": (
            "dac1",
            ["lctl", "ping", "10.0.0.2@tcp", "121"],
            1,
            "Timeout 121 is to large",
        ),
        "mdt max_mod_rpcs_in_flight before 2.16": (
            "dac1",
            ["lctl", "set_param", "mdt.fs1-MDT*.max_mod_rpcs_in_flight=127"],
            2,
            "param_path 'mdt/fs1-MDT*/max_mod_rpcs_in_flight': No such file or directory",
        ),
    },
    "2.16": {
        **_RELEASED,
        "ping of an unknown nid": (
            "dac1",
            ["lctl", "ping", "10.0.0.9@tcp"],
            5,
            "failed to ping 10.0.0.9@tcp: Input/output error",
        ),
        "ping with a timeout over 120 s": (
            "dac1",
            ["lctl", "ping", "10.0.0.2@tcp", "121"],
            22,
            "Timeout 121 is to large",
        ),
    },
    "master": {
        "erase_lcfg away from the mgs": (
            "dac2",
            ["lctl", "erase_lcfg", "fs1"],
            19,
            "This command must be run on the MGS.",
        ),
        "erase_lcfg of an unknown fs": (
            "dac1",
            ["lctl", "erase_lcfg", "nofs"],
            2,
            "OBD_IOC_LCFG_ERASE failed: No such file or directory",
        ),
        "index too large": (
            "dac1",
            [*_OST, "--index=65504", "{spare}"],
            1,
            "Target index must be less than 65504",
        ),
        "ping of an unknown nid": (
            "dac1",
            ["lctl", "ping", "10.0.0.9@tcp"],
            5,
            "failed to ping 10.0.0.9@tcp: Input/output error",
        ),
    },
}
ACCEPTED_OF = {
    "2.15": {
        "index up to 65534": (
            "dac1",
            ["mkfs.lustre", "--dryrun", *_OST[1:], "--index=65534", "{spare}"],
            "fs1-OSTfffe",
        ),
        "ping with a timeout": (
            "dac1",
            ["lctl", "ping", "10.0.0.2@tcp", "30"],
            "12345-10.0.0.2@tcp",
        ),
    },
    "2.16": {
        "index up to 65534": (
            "dac1",
            ["mkfs.lustre", "--dryrun", *_OST[1:], "--index=65534", "{spare}"],
            "fs1-OSTfffe",
        ),
        "ping with a timeout": (
            "dac1",
            ["lctl", "ping", "10.0.0.2@tcp", "30"],
            "12345-10.0.0.2@tcp",
        ),
        "version alone": ("dac1", ["mkfs.lustre", "--version"], "mkfs.lustre 2.16.1"),
    },
    "master": {
        "device first": (
            "dac1",
            ["mkfs.lustre", "{spare}", "-n", "-O", "-L", "fs1", "-i", "7", "-m", "10.0.0.1@tcp0"],
            "fs1-OST0007",
        )
    },
}


def refusals(release: str) -> dict:
    return {**REFUSALS, **REFUSALS_OF[release]}


def accepted(release: str) -> dict:
    return {**ACCEPTED, **ACCEPTED_OF[release]}


@pytest.fixture(scope="module")
def verdicts(templates):
    """Per release, every refusal and accepted case run against one copy of the running site,
    several at a time (none changes anything, so they cannot disturb each other): (rc, stdout,
    stderr) by case, and the state before and after them all."""
    done: dict[str, tuple] = {}

    def of(release: str) -> tuple:
        if release in done:
            return done[release]
        s = restore(templates(release))
        names = {
            "spare": _spare(s),
            "spare_dir": s.path("targets", "spare"),
            "d1": s.dev("dac1", "nvme0n1"),
            "d2": s.dev("dac2", "nvme0n1"),
            "root": str(s.root),
        }
        cases = {**refusals(release), **accepted(release)}

        def run(case):
            host, argv = cases[case][:2]
            finished = s.run(host, *(a.format(**names) for a in argv))
            return finished.returncode, finished.stdout, finished.stderr

        before = (s.root / "state.json").read_text()
        with ThreadPoolExecutor(max_workers=4) as pool:
            results = dict(zip(cases, pool.map(run, cases), strict=True))
        done[release] = results, names, before, (s.root / "state.json").read_text()
        return done[release]

    return of


@pytest.mark.parametrize("release,case", [(r, c) for r in RELEASES for c in refusals(r)])
def test_refusal(verdicts, release, case):
    results, names = verdicts(release)[:2]
    rc, _, stderr = results[case]
    want = refusals(release)[case]
    assert (rc, want[3].format(**names) in stderr) == (want[2], True), stderr


@pytest.mark.parametrize("release,case", [(r, c) for r in RELEASES for c in accepted(r)])
def test_accepted(verdicts, release, case):
    results, names = verdicts(release)[:2]
    rc, stdout, stderr = results[case]
    assert (rc, accepted(release)[case][2].format(**names) in stdout) == (0, True), (stdout, stderr)


@pytest.mark.parametrize("release", RELEASES)
def test_verdicts_leave_the_state_untouched(verdicts, release):
    _, _, before, after = verdicts(release)
    assert after == before


def test_set_param_exits_with_the_first_failure_on_2_15_and_the_last_status_after(site):
    # the client connected to MDTs that allow 8 modifying RPCs: 127 is ERANGE on every release
    done = site.run(
        "dac1",
        "lctl",
        "set_param",
        "mdc.fs1-*.max_mod_rpcs_in_flight=127",
        "llite.fs1-*.checksum_pages=0",
    )
    assert "max_mod_rpcs_in_flight=127: Numerical result out of range" in done.stderr
    assert done.returncode == (34 if site.release == "2.15" else 0)
    # the parameters that could be set are set either way
    params = [p["param"] for p in site.state()["lustre"]["params"]]
    assert params == ["llite.fs1-*.checksum_pages"]


def _client_again(s: Site) -> None:
    """Remount the staging client: a client learns its servers' limits when it connects."""
    s.ok("dac1", "umount", s.path("dac1", "fs"))
    s.ok("dac1", "mount", "-t", "lustre", "-o", OPTS, f"{MGS}:/fs1", s.path("dac1", "fs"))


def test_client_max_mod_rpcs_in_flight_is_bounded_by_the_mdts(site):
    mdc = "mdc.fs1-*.max_mod_rpcs_in_flight=127"
    if site.release == "2.15":  # only the mdt module parameter, read when the client connects
        facts = json.loads((site.root / "site.json").read_text())
        facts["lustre"]["max_mod_rpcs_per_client"] = 128
        (site.root / "site.json").write_text(json.dumps(facts))
    else:
        for host in ("dac1", "dac2"):
            site.ok(host, "lctl", "set_param", "mdt.fs1-MDT*.max_mod_rpcs_in_flight=127")
    # a client connected before the change still has the old limit
    done = site.run("dac1", "lctl", "set_param", "mdc.fs1-*.max_rpcs_in_flight=128", mdc)
    assert done.returncode == 34 and "Numerical result out of range" in done.stderr
    _client_again(site)
    site.ok("dac1", "lctl", "set_param", "mdc.fs1-*.max_rpcs_in_flight=128", mdc)
    done = site.run("dac1", "lctl", "set_param", "mdc.fs1-*.max_mod_rpcs_in_flight=200")
    assert done.returncode == 34


def test_client_max_pages_per_rpc_is_bounded_by_the_osts_brw_size(site):
    osc = "osc.fs1-*.max_pages_per_rpc=4096"  # 16 MiB: more than the default 4 MiB brw_size
    assert site.run("dac1", "lctl", "set_param", osc).returncode == 34
    site.ok("dac1", "lctl", "set_param", "obdfilter.fs1-OST*.brw_size=16")
    site.ok("dac2", "lctl", "set_param", "obdfilter.fs1-OST*.brw_size=16")
    assert site.run("dac1", "lctl", "set_param", osc).returncode == 34  # connected before
    _client_again(site)
    site.ok("dac1", "lctl", "set_param", osc, "osc.fs1-*.max_pages_per_rpc=16M")
    assert site.run("dac1", "lctl", "set_param", "osc.fs1-*.max_pages_per_rpc=32M").returncode == 34


def test_mkfs_refuses_a_lustre_device_without_reformat(site):
    spare = _spare(site)
    args = ["mkfs.lustre", "--ost", "--fsname=fs1", "--index=2", f"--mgsnode={MGS}", spare]
    site.ok("dac1", *args)
    done = site.run("dac1", *args)
    assert done.returncode == 1
    assert f"Device {spare} was previously formatted for lustre. Use --reformat" in done.stderr
    site.ok("dac1", *args[:1], "--reformat", *args[1:])


def test_target_mount_needs_its_mgs_and_a_free_index(site):
    spare = _spare(site)
    site.ok(
        "dac1", "mkfs.lustre", "--ost", "--fsname=fs2", "--index=0", "--mgsnode=10.0.0.2@tcp", spare
    )
    done = site.run("dac1", "mount", "-t", "lustre", spare, site.path("targets", "spare"))
    assert (done.returncode, done.stderr.splitlines()[-1]) == (5, "Is the MGS running?")
    site.ok(
        "dac1",
        "mkfs.lustre",
        "--ost",
        "--reformat",
        "--fsname=fs1",
        "--index=0",
        f"--mgsnode={MGS}",
        spare,
    )
    done = site.run("dac1", "mount", "-t", "lustre", spare, site.path("targets", "spare"))
    assert done.returncode == 98 and "index is already in use" in done.stderr


def test_one_mgs_per_node(site):
    spare = _spare(site)
    site.ok("dac1", "mkfs.lustre", "--mgs", spare)
    done = site.run("dac1", "mount", "-t", "lustre", spare, site.path("targets", "spare"))
    assert done.returncode == 114 and "Operation already in progress" in done.stderr


def test_client_mount_waits_for_mdt0_and_an_ost(blank):
    s, disk = blank, blank.dev("dac1", "nvme0n1")
    s.ok("dac1", "mkfs.lustre", "--mgs", "--mdt", "--fsname=fs1", "--index=0", disk)
    client = ["mount", "-t", "lustre", "-o", OPTS, f"{MGS}:/fs1", s.path("dac1", "fs")]
    assert s.run("dac1", *client).returncode == 5  # its MGS (on MDT0's device) is down
    s.ok("dac1", "mount", "-t", "lustre", disk, s.path("targets", "mdt0"))
    done = s.run("dac1", *client)
    assert done.returncode == 123 and "needs at least 1 OST" in done.stderr


def test_umount_refuses_a_mount_with_another_below_it(site):
    inner = site.root / "dac1" / "fs" / "striped"
    site.ok("dac1", "mount", "-t", "lustre", "-o", OPTS, f"{MGS}:/fs1/striped", str(inner))
    done = site.run("dac1", "umount", site.path("dac1", "fs"))
    assert (done.returncode, done.stderr.strip()) == (
        32,
        f"umount: {site.path('dac1', 'fs')}: target is busy.",
    )
    site.ok("dac1", "umount", str(inner), site.path("dac1", "fs"))


def test_umount_refuses_a_mount_a_process_uses_until_lazy(site):
    inner = site.root / "dac1" / "fs" / "striped"
    site.ok("dac1", "mount", "-t", "lustre", "-o", OPTS, f"{MGS}:/fs1/striped", str(inner))
    holder = subprocess.Popen(["sleep", "60"], cwd=inner)  # a real process, its cwd in the mount
    try:
        done = site.run("dac1", "umount", str(inner))
        assert (done.returncode, done.stderr.strip()) == (32, f"umount: {inner}: target is busy.")
        site.ok("dac1", "umount", "--lazy", str(inner))
        # detached, it still holds its own mount, not the mount of the whole filesystem
        site.ok("dac1", "umount", site.path("dac1", "fs"))
        assert site.state()["mounts"]["dac1"] == [
            e for e in site.state()["mounts"]["dac1"] if e.get("kind") == "target"
        ]
    finally:
        holder.kill()
        holder.wait()


def test_parted_keeps_the_commands_before_a_failing_one(blank):
    disk = blank.dev("dac1", "nvme0n1")
    done = blank.run(
        "dac1",
        "parted",
        "--script",
        disk,
        "mklabel",
        "gpt",
        "mkpart",
        "mdt",
        "1MiB",
        "20MiB",
        "mkpart",
        "ost",
        "10MiB",
        "30MiB",
    )
    assert done.returncode == 1 and "You requested a partition from 10.5MB to 31.5MB" in done.stderr
    parts = blank.state()["devices"]["dac1"][disk]["parts"]
    assert [p["name"] for p in parts] == ["mdt"]
    assert sorted(os.listdir(blank.path("dac1", "dev"))) == ["nvme0n1", "nvme0n1p1", "nvme1n1"]


def test_wipefs_force_keeps_the_kernels_partitions(blank):
    disk = blank.dev("dac2", "nvme1n1")
    blank.ok("dac2", "parted", "--script", disk, "mklabel", "gpt", "mkpart", "ost", "1MiB", "100%")
    blank.ok("dac2", "wipefs", "--all", "--force", disk)
    assert os.path.exists(f"{disk}p1")  # no O_EXCL, so no partition table re-read
    assert blank.state()["devices"]["dac2"][disk]["label"] is None


def test_every_call_is_recorded_and_a_fault_fires_once(blank):
    disk = blank.dev("dac1", "nvme0n1")
    (blank.root / "faults.json").write_text(
        json.dumps(
            [
                {
                    "tool": "mkfs.lustre",
                    "host": "dac1",
                    "contains": ["--ost"],
                    "rc": 5,
                    "stderr": "mkfs.lustre: injected",
                }
            ]
        )
    )
    args = ["mkfs.lustre", "--ost", "--fsname=fs1", "--index=0", f"--mgsnode={MGS}", disk]
    assert blank.run("dac2", *args[:-1], blank.dev("dac2", "nvme0n1")).returncode == 0
    done = blank.run("dac1", *args)
    assert (done.returncode, done.stderr.strip()) == (5, "mkfs.lustre: injected")
    blank.ok("dac1", *args)
    blank.run("dac1", "umount", blank.path("targets", "spare"))
    calls = blank.calls()
    assert [(c["host"], c["argv"][0], c["rc"]) for c in calls] == [
        ("dac2", "mkfs.lustre", 0),
        ("dac1", "mkfs.lustre", 5),
        ("dac1", "mkfs.lustre", 0),
        ("dac1", "umount", 32),
    ]
    assert calls[2]["argv"] == args
    assert calls[3]["stderr"] == f"umount: {blank.path('targets', 'spare')}: not mounted."


def test_hosts_mounting_one_mount_point_each_have_their_own_client(site):
    """The site's hosts share one tree, so every server's staging client of a buffer (issue 35:
    each at the primary's fs_path) is one directory: each host's mount is its own entry, and
    the directory shows the filesystem until the last of them is unmounted, whatever order."""
    point = site.path("dac1", "fs")
    for first, last in (("dac1", "dac2"), ("dac2", "dac1")):
        if first == "dac2":  # dac1's client is the template's; the second round starts anew
            site.ok("dac1", "mount", "-t", "lustre", "-o", OPTS, f"{MGS}:/fs1", point)
        site.ok("dac2", "mount", "-t", "lustre", "-o", OPTS, f"{MGS}:/fs1", point)
        clients = {
            h: [e["dir"] for e in m if e.get("kind") == "client"]
            for h, m in site.state()["mounts"].items()
        }
        assert clients == {"dac1": [point], "dac2": [point]}
        # each is a client of its own: its tuning, on its host
        site.ok("dac2", "lctl", "set_param", "llite.fs1-*.checksum_pages=0")
        site.ok(first, "umount", point)
        assert os.path.islink(point) and os.listdir(point) == ["striped"]  # last's still shows it
        done = site.run(first, "umount", point)
        assert (done.returncode, done.stderr.strip()) == (32, f"umount: {point}: not mounted.")
        site.ok(last, "umount", point)
        # the last one gone, the mount point is the empty directory it was
        assert not os.path.islink(point) and os.listdir(point) == []
        assert not [e for m in site.state()["mounts"].values() for e in m if e["kind"] == "client"]


def test_another_host_showing_something_else_at_a_mount_point_is_refused_not_faked(site):
    before = site.state()
    done = site.run(
        "dac2", "mount", "-t", "lustre", "-o", OPTS, f"{MGS}:/fs1/striped", site.path("dac1", "fs")
    )
    assert done.returncode == 32 and "does not model" in done.stderr
    assert site.state() == before


@pytest.mark.skipif(os.geteuid() != 0, reason="a mount namespace of its own needs root")
def test_a_process_of_another_hosts_namespace_keeps_only_that_hosts_client_busy(site):
    """Two hosts' clients at one mount point lead into one store: a process holding it counts
    for the host whose mount namespace it is in (the multi-host site gives each host its own),
    not for the other; one in this namespace counts for both (the one-machine site's hosts
    share it, so which host's it is cannot be told)."""
    point = site.path("dac1", "fs")
    site.ok("dac2", "mount", "-t", "lustre", "-o", OPTS, f"{MGS}:/fs1", point)
    elsewhere = subprocess.Popen(["unshare", "--mount", "sleep", "60"], cwd=point)
    here = None
    try:
        mine = os.readlink("/proc/self/ns/mnt")
        for _ in range(500):  # until unshare has made its namespace
            if os.readlink(f"/proc/{elsewhere.pid}/ns/mnt") != mine:
                break
            time.sleep(0.01)
        else:
            raise AssertionError("unshare --mount made no namespace")
        site.ok("dac1", "umount", point)  # another namespace's process: not dac1's mount's
        site.ok("dac1", "mount", "-t", "lustre", "-o", OPTS, f"{MGS}:/fs1", point)
        here = subprocess.Popen(["sleep", "60"], cwd=point)
        done = site.run("dac1", "umount", point)
        assert (done.returncode, done.stderr.strip()) == (32, f"umount: {point}: target is busy.")
    finally:
        for p in (elsewhere, here):
            if p:
                p.kill()
                p.wait()
    site.ok("dac1", "umount", point)
    site.ok("dac2", "umount", point)
    assert not os.path.islink(point) and os.listdir(point) == []
