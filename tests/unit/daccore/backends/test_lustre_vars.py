"""The lustre backend's plan for a buffer: partitions, targets, MGS NID, mounts (pure)."""

import pytest

from daccore.backends import get
from daccore.backends.lustre import LustreBackend, fsname, partition
from daccore.records.models import Allocation, BrickRef, Buffer, BufferRequest
from daccore.settings.config import DacConfig

GiB = 1 << 30


def lustre_backend(config: DacConfig, host: str) -> LustreBackend:
    """The backend `get` finds by name, as dacd gets it."""
    backend = get("lustre", config, host)
    assert isinstance(backend, LustreBackend)
    return backend


def config(mgs="per_buffer", **lustre):
    return DacConfig.model_validate(
        {
            "pools": {
                "l": {
                    "granularity": 100 * GiB,
                    "backend": "lustre",
                    "lustre": {"mgs": mgs, "lnet_suffix": "@o2ib1", "mdt_size": "20GiB", **lustre},
                }
            },
            "node_root": "/nodes/{node}",
            "mount_root": "/mnt/dac",
            "hosts": {
                h: {
                    "fs_root": f"/fs/{h}",
                    "bricks": [
                        {"device": f"/dev/nvme{i}n1", "capacity": 100 * GiB, "pool": "l"}
                        for i in range(3)
                    ],
                }
                for h in ("dac1", "dac2", "dac3")
            },
        }
    )


def buffer(bricks, access="striped", attachments=None, primary="dac2"):
    return Buffer(
        name="42",
        owner_uid=1000,
        owner_gid=100,
        created_at=1.5,
        request=BufferRequest(capacity=100 * GiB * len(bricks), pool="l", access=access),
        attachments=attachments or {},
        allocation=Allocation(
            primary_host=primary,
            bricks=[
                BrickRef(host=h, brick=f"nvme{i}n1", device=f"/dev/nvme{i}n1", capacity=100 * GiB)
                for h, i in bricks
            ],
        ),
    )


def test_fsname_is_eight_letters_stable_for_a_buffer_and_new_for_a_new_one():
    b = buffer([("dac2", 0)])
    assert fsname(b) == fsname(buffer([("dac2", 0)])) and len(fsname(b)) == 8
    assert fsname(b).isalpha() and fsname(b).islower()
    assert fsname(b) != fsname(b.model_copy(update={"created_at": 2.5}))


@pytest.mark.parametrize(
    "disk,first",
    [
        ("/dev/nvme0n1", "/dev/nvme0n1p1"),
        ("/dev/sdb", "/dev/sdb1"),
        ("/dev/loop3", "/dev/loop3p1"),
        # udev's persistent links: <link>-part<N> (systemd's 60-persistent-storage.rules)
        *(
            (disk, f"{disk}-part1")
            for disk in (
                "/dev/disk/by-id/nvme-SAMSUNG_MZWLR3T8_S5Z2NE0R1",
                "/dev/disk/by-id/wwn-0x5000c500a1b2",
                "/dev/disk/by-path/pci-0000:81:00.0-nvme-1",
            )
        ),
    ],
)
def test_partitions_are_named_as_the_kernel_or_udev_names_them(disk, first):
    assert partition(disk, 1) == first


def test_mdt0_and_the_mgs_sit_on_the_primary_and_each_server_has_one_mdt():
    b = buffer([("dac1", 0), ("dac1", 1), ("dac2", 0), ("dac2", 2)])
    plan = lustre_backend(config(), "dac2").targets(b)
    assert list(plan) == ["dac2", "dac1"]  # the primary first
    fs = fsname(b)
    mdt_end = f"{1 + 20 * 1024}MiB"
    assert plan["dac2"]["disks"][0]["parted"] == [
        "parted",
        "--script",
        "/dev/nvme0n1",
        "mklabel",
        "gpt",
        "mkpart",
        "mdt",
        "1MiB",
        mdt_end,
        "mkpart",
        "ost",
        mdt_end,
        "100%",
    ]
    assert plan["dac2"]["disks"][1]["parted"][-4:] == ["mkpart", "ost", "1MiB", "100%"]
    mkfs = [t["mkfs"] for h in plan for t in plan[h]["targets"]]
    assert mkfs == [
        [
            "mkfs.lustre",
            "--mgs",
            "--mdt",
            "--reformat",
            f"--fsname={fs}",
            "--index=0",
            "/dev/nvme0n1p1",
        ],
        [
            "mkfs.lustre",
            "--ost",
            "--reformat",
            f"--fsname={fs}",
            "--index=0",
            "--mgsnode=dac2@o2ib1",
            "/dev/nvme0n1p2",
        ],
        [
            "mkfs.lustre",
            "--ost",
            "--reformat",
            f"--fsname={fs}",
            "--index=1",
            "--mgsnode=dac2@o2ib1",
            "/dev/nvme2n1p1",
        ],
        [
            "mkfs.lustre",
            "--mdt",
            "--reformat",
            f"--fsname={fs}",
            "--index=1",
            "--mgsnode=dac2@o2ib1",
            "/dev/nvme0n1p1",
        ],
        [
            "mkfs.lustre",
            "--ost",
            "--reformat",
            f"--fsname={fs}",
            "--index=2",
            "--mgsnode=dac2@o2ib1",
            "/dev/nvme0n1p2",
        ],
        [
            "mkfs.lustre",
            "--ost",
            "--reformat",
            f"--fsname={fs}",
            "--index=3",
            "--mgsnode=dac2@o2ib1",
            "/dev/nvme1n1p1",
        ],
    ]
    assert plan["dac1"]["disks"][0]["partitions"] == ["/dev/nvme0n1p1", "/dev/nvme0n1p2"]
    assert plan["dac1"]["disks"][1]["partitions"] == ["/dev/nvme1n1p1"]


def test_the_mdt_ceiling_caps_the_count_across_servers():
    b = buffer([("dac1", 0), ("dac1", 1), ("dac2", 0), ("dac2", 1), ("dac3", 0)])
    plan = lustre_backend(config(max_mdts=2, max_mdts_per_host=2), "dac2").targets(b)
    kinds = [(h, t["kind"], t["index"]) for h in plan for t in plan[h]["targets"]]
    assert [k for k in kinds if k[1] != "ost"] == [("dac2", "mgs", 0), ("dac2", "mdt", 1)]
    assert [k[2] for k in kinds if k[1] == "ost"] == [0, 1, 2, 3, 4]


def test_a_shared_mgs_is_named_by_every_target_and_client():
    b = buffer([("dac2", 0)], attachments={"7": ["n1"]})
    backend = lustre_backend(config(mgs={"host": "mgs1", "nid": "10.9.9.9@o2ib1"}), "dac2")
    plan = backend.targets(b)
    assert all(
        "--mgsnode=10.9.9.9@o2ib1" in t["mkfs"] and "--mgs" not in t["mkfs"]
        for t in plan["dac2"]["targets"]
    )
    v = backend.variables(b, "create")
    assert v["fs_source"] == f"10.9.9.9@o2ib1:/{fsname(b)}" and v["shared_mgs"]
    inv = backend.inventory(b, "mount")["all"]["children"]
    assert inv["mgs"]["hosts"] == {"mgs1": {}}
    assert inv["clients"]["hosts"]["n1"]["mounts"] == [
        {"target": "/nodes/n1/7/striped", "source": f"10.9.9.9@o2ib1:/{fsname(b)}/striped"}
    ]


def test_mounts_follow_attachments_and_private_dirs_are_made_by_the_primary():
    b = buffer([("dac2", 0)], access="striped,private", attachments={"7": ["n1", "n2"]})
    backend = lustre_backend(config(), "dac2")
    fs = fsname(b)
    inv = backend.inventory(b, "mount", attached={"6": ["n2"]})["all"]["children"]
    assert inv["servers"]["hosts"]["dac2"]["private_dirs"] == ["private/n1", "private/n2"]
    n1 = inv["clients"]["hosts"]["n1"]
    assert n1["mounts"] == [
        {"target": "/nodes/n1/7/private", "source": f"dac2@o2ib1:/{fs}/private/n1"},
        {"target": "/nodes/n1/7/striped", "source": f"dac2@o2ib1:/{fs}/striped"},
    ]
    assert inv["clients"]["hosts"]["n2"]["unmounts"] == [
        "/nodes/n2/6/private",
        "/nodes/n2/6/striped",
    ]
    gone = backend.inventory(b, "delete", attached={"7": ["n1"]})["all"]["children"]["clients"]
    assert gone["hosts"]["n1"]["mounts"] == [] and len(gone["hosts"]["n1"]["unmounts"]) == 2
    assert gone["hosts"]["n2"]["unmounts"] == ["/nodes/n2/7/private", "/nodes/n2/7/striped"]


def test_the_io500_profile_names_the_buffers_own_targets_only():
    b = buffer([("dac2", 0)])
    v = lustre_backend(config(tuning="io500"), "dac2").variables(b, "create")
    fs = fsname(b)
    plan = lustre_backend(config(tuning="io500"), "dac2").targets(b)
    assert plan["dac2"]["server_tuning"] == [
        f"obdfilter.{fs}-OST*.brw_size=16",
        f"obdfilter.{fs}-OST*.precreate_batch=1024",
    ]
    assert "server_tuning" not in v  # per server (inventory): extravars would override it
    assert f"osc.{fs}-*.max_pages_per_rpc=4096" in v["client_tuning"]
    assert all(
        p.split(".")[1].startswith(fs) or p.startswith(f"ldlm.namespaces.{fs}")
        for p in v["client_tuning"]
    )
    assert lustre_backend(config(), "dac2").variables(b, "create")["client_tuning"] == []


@pytest.mark.parametrize(
    "release,per_client,mod_rpcs",
    [("2.15", 8, 8), ("2.15", 64, 64), ("2.15", 500, 127), ("2.16", 8, 127)],
)
def test_io500_keeps_clients_within_what_their_mdts_allow(release, per_client, mod_rpcs):
    """A client refuses max_mod_rpcs_in_flight above its MDT's limit (ERANGE). 2.16 raises the
    MDT's own limit first, on servers with an MDT; 2.15 has only the module parameter."""
    b = buffer([("dac2", 0), ("dac1", 0), ("dac3", 0)])
    backend = lustre_backend(
        config(tuning="io500", release=release, max_mdts=2, max_mod_rpcs_per_client=per_client),
        "dac2",
    )
    fs = fsname(b)
    assert (
        f"mdc.{fs}-*.max_mod_rpcs_in_flight={mod_rpcs}"
        in backend.variables(b, "create")["client_tuning"]
    )
    plan = backend.targets(b)
    mdt = f"mdt.{fs}-MDT*.max_mod_rpcs_in_flight=127"
    with_mdt = [h for h in plan if any(t["kind"] != "ost" for t in plan[h]["targets"])]
    assert with_mdt == ["dac2", "dac1"]
    for host in plan:
        assert (plan[host]["server_tuning"][:1] == [mdt]) == (
            release == "2.16" and host in with_mdt
        )


def test_the_shared_mgs_is_pinged_with_a_timeout_and_targets_start_mdt0_first():
    b = buffer([("dac2", 0), ("dac1", 0)])
    backend = lustre_backend(config(mgs={"host": "mgs1", "nid": "10.9.9.9@o2ib1"}), "dac2")
    assert backend.variables(b, "create")["ping_timeout"] == "10"
    roles = [
        (h, t["role"], t["index"]) for h, p in backend.targets(b).items() for t in p["targets"]
    ]
    assert roles == [
        ("dac2", "mdt0", 0),
        ("dac2", "ost", 0),
        ("dac1", "mdt", 1),
        ("dac1", "ost", 1),
    ]


def test_unmounted_nodes_prune_their_mount_points_and_empty_parents_only():
    from daccore.backends import prune_list

    assert prune_list(
        ["/nodes/n1/7/striped", "/nodes/n1/7/private", "/nodes/n1/8/persistent/p"], "/nodes/n1"
    ) == [
        "/nodes/n1/8/persistent/p",
        "/nodes/n1/7/private",
        "/nodes/n1/7/striped",
        "/nodes/n1/8/persistent",
        "/nodes/n1/7",
        "/nodes/n1/8",
    ]
    b = buffer([("dac2", 0)], attachments={})
    inv = lustre_backend(config(), "dac2").inventory(b, "unmount", attached={"7": ["n1"]})
    assert inv["all"]["children"]["clients"]["hosts"]["n1"]["prune"] == [
        "/nodes/n1/7/striped",
        "/nodes/n1/7",
    ]
