"""The Lustre side of the recorded-command site: what each stand-in checks, and where from.

Importing this module registers the Lustre-side stand-ins: mkfs.lustre (lustre_mkfs.py), mount
and umount (lustre_mount.py), lctl (lustre_lctl.py), lfs (lustre_lfs.py), parted, wipefs and
udevadm (disk_tools.py). The state they share is described in disk_state.py and
lustre_model.py; argv is parsed the way glibc's getopt_long parses it (gnu_getopt.py), NIDs the
way libcfs parses them (lnet.py).

Releases. site.json {"lustre": {"release": "2.15" | "2.16" | "master"}} picks the Lustre the
site runs (default 2.15); the rules below hold for all three unless marked [2.15], [2.16] or
[master]. Sources read: lustre-release at tags v2_15_7 and v2_16_1 and master (2.17.57+); file
and line are cited beside each rule in the modules (lustre_mkfs.py, lustre_lctl.py,
lustre_model.py), by tag. Also util-linux 2.38.1 (Debian 12's), GNU parted 3.5
(also run on an image file to confirm its messages), systemd's udevadm. Messages and exit
statuses are the real tool's; a rule marked (site) is stricter than the real tool on purpose and
says so in its message, and real features the site does not model are refused with a message
that says "this site does not model ...". A refusal changes no state, except where the real tool
itself works step by step and keeps what it did (parted's commands, wipefs and umount over
several devices, set_param over several parameters).

mkfs.lustre (lustre/utils/mkfs_lustre.c, mount_utils.c, libmount_utils_ldiskfs.c)
  * getopt_long options of mkfs.lustre (--mgs --mdt --ost --reformat --fsname --index --mgsnode
    /--mgsnid --failnode/--servicenode (exclusive) --param --network (only after --mdt/--ost)
    --stripe-count-hint (only after --mdt, > 0) --backfstype --replace --dryrun ...); an unknown
    one: getopt's message, rc 22. --backfstype other than ldiskfs/zfs: rc 1; zfs: (site) not
    modelled
  * [2.15, 2.16] the device is the last argument: a last argument starting with '-' prints the
    usage, rc 22, before anything is parsed ([2.16] except a lone --version/-V); [master] the
    device may come anywhere (GNU permutation)
  * exactly one device (rc 22); a target type ("must set target type: MDT,OST,MGS", rc 22);
    --ost alone ("OST type is exclusive with MDT,MGS", rc 22)
  * --fsname 1-8 characters of [A-Za-z0-9_-] (rc 1), required for MDT/OST (rc 22)
  * --index decimal or 0x-hex, [2.15, 2.16] below INDEX_UNASSIGNED (65535), [master] at most
    65503 = LOV_V1_INSANE_STRIPE_INDEX (rc 1); given to a standalone --mgs it is refused the
    real way: message, nothing written, exit status 0
  * non-MGS targets need --mgsnode ("Must specify --mgsnode", or "--mgs or --mgsnode" for an
    MDT, rc 22); every NID must parse, else "Unsupported NID" (rc 1)
  * the device exists ("apparently does not exist", rc 2), is not mounted (rc 17), is not a
    disk with a mounted partition (mke2fs refuses, rc 1); a device already formatted for Lustre
    needs --reformat ("was previously formatted for lustre", rc 1)
  * records fsname, kinds, index, mgsnode; reformatting an MGS forgets its registrations
mount -t lustre (util-linux sys-utils/mount.c; lustre/utils/mount_lustre.c; the kernel's
lmd_parse in lustre/obdclass/obd_mount.c, ll_options in lustre/llite/llite_lib.c,
lustre/target/tgt_mount.c). mount(8) exits with mount.lustre's status, an errno:
  * (site) only -t lustre ("this site only stands in for lustre mounts", rc 32); mount(8)'s own
    argv errors (rc 1); the mount point exists ("cannot resolve", rc 2) and is a directory
  * -o: mount(8) flags (prefix-matched, as mount.lustre does), mount.lustre's own options and the
    kernel's server options are taken out; what is left must be a client option ll_options knows
    (flock, localflock, noflock, user_xattr, nouser_xattr, lazystatfs, ...; not acl) or, on a
    target, an ldiskfs option; else EINVAL with "Are the mount options correct?" (rc 22)
  * the same source already on the same directory: "according to /etc/mtab ..." (rc 17)
  * target: formatted for Lustre (rc 19) with an index (rc 22); not already running anywhere,
    and one MGS per node (EALREADY, rc 114); a non-MGS target needs an MGS mounted on a host
    owning one of its --mgsnode NIDs (EIO, "Is the MGS running?", rc 5); its name must not be
    registered with that MGS for another device unless formatted --replace (EADDRINUSE, rc 98)
  * client <mgsspec>:/<fsname>[/<subdir>]: the NIDs parse (rc 22); an MGS is mounted at one of
    them (rc 5); it knows <fsname>-MDT0000 (else ENOENT, "Is the filesystem name correct?",
    rc 2); MDT0000 is mounted (rc 5); (site) an OST of the filesystem is mounted (ENOMEDIUM,
    rc 123; a real client would mount and then block on I/O); <subdir> is a directory in the
    filesystem (rc 2). While mounted, the mount point shows the filesystem's files and hides
    what it covered (lustre_model.py). (site) Hosts are directories of one machine: several
    hosts may mount the same filesystem at one path, each mount its own, the path showing it
    until the last is unmounted; another host showing something else there is refused (rc 32)
umount (util-linux sys-utils/umount.c): "<path>: not mounted." for an existing path, "<path>: no
  mount point specified." for a missing one, "<path>: target is busy." (umount2(2) EBUSY,
  libmount context_umount.c) while a mount sits below it or a process of this machine has its
  cwd, root or an open file in it (fs/namespace.c do_umount(); read from /proc: a path in a
  filesystem's store counts for the client mounts whose root holds it most closely, and,
  where other hosts mount the same root, only if it is in this umount's mount namespace,
  lustre_mount._users); -l/--lazy detaches regardless (MNT_DETACH), and a client mount still
  used lives on detached, its users its own, until they let it go; rc 32 each, summed over
  several paths (as util-linux adds them up)
lctl (lustre/utils/lctl.c, lustre_param.c, lustre_cfg.c, obd.c, portals.c; lib/libcfs/parser.c)
  * ping NID[ timeout]: the NID parses, timeout <= 120 s; a site host owning the NID answers,
    else "failed to ping <nid>: Input/output error". [2.15] every failure exits 1, the usage
    line exits 0; [2.16, master] EINVAL (22) for usage, NID and timeout, EIO (5) for no answer,
    printed on stdout too. list_nids prints the host's NIDs
  * set_param [-P] [-d] NAME=VALUE | NAME VALUE ...; names are <type>.<devices>.<name>
    (ldlm.namespaces.<devices>.<name>, or a global such as timeout). Without -P the name must
    exist on this host now: osc/mdc/llite/ldlm.namespaces need a client mount of the
    filesystem, obdfilter an OST, mdt/lod an MDT ("param_path '...': No such file or directory",
    rc 2). Known numeric parameters take what their kernel store function takes (kstrtouint,
    kstrtobool, sizes; brw_size 4 KiB-64 MiB, osc max_rpcs_in_flight 1-256, mdc 1-512, at least
    2), else EINVAL (rc 22) or ERANGE (rc 34). [2.16, master] mdt.*.max_mod_rpcs_in_flight
    (1-512) exists; [2.15] it does not (only the mdt module's max_mod_rpcs_per_client:
    site.json lustre.max_mod_rpcs_per_client, default 8). Values that depend on a server are
    checked against what the client was told when it connected (its mount): mdc
    max_mod_rpcs_in_flight at most the MDT's limit (else ERANGE; raising it to or past
    max_rpcs_in_flight raises that first), osc max_pages_per_rpc (pages below 1 MiB, bytes
    from 1 MiB) at most the OST's brw_size (default 4 MiB). Every parameter is tried and what
    could be set stays set; the exit status is [2.15] the first failure's, [2.16, master] the
    last parameter's (jt_lcfg_setparam). -P runs only where an MGS is mounted ("This
    command must be run on the MGS.", rc 19); (site) its values are checked too, and its type
    must be one lctl knows (rc 22). Usage errors print the help, rc 4 (CMD_HELP)
  * erase_lcfg FSNAME: on the MGS's node (rc 19); FSNAME must have logs there ("OBD_IOC_LCFG_ERASE
    failed: No such file or directory", rc 2, also for a filesystem never registered); the real
    tool does not refuse while targets are mounted, so neither does the site
  * unknown commands: "'x' is not a valid command" (rc 1)
lfs setstripe (lustre/utils/lfs.c lfs_setstripe_internal, liblustreapi.c)
  * -c -1..2000, -C -32..2000, -i -1..65503; -S and -E sizes multiples of 64 KiB (a number under
    4096 is read as KiB); -E ends increasing; usage errors rc 4 (CMD_HELP). -S under 4 GiB,
    -L mdt|raid0 (mdt only first, at most 1 GiB, with -E), else rc 22 or 27. -p: (site) no
    OST pools, only the "none"/"ignore"/"inherit" names
  * the path must be inside a Lustre client mount on this host ("setstripe error for '...':
    Inappropriate ioctl for device", rc 25; a missing path is created as a file first, as
    open(O_CREAT) does, and a missing parent is rc 2); -i/-o name mounted OSTs of the
    filesystem (rc 22); an existing file already has its layout (rc 17); read-only mount (rc 30)
parted (parted/parted.c, libparted/unit.c): DEVICE then commands, run in order and each
  committed. mklabel LABEL (a known label; not while a partition is in use); mkpart NAME (gpt)
  or primary (msdos) [FS-TYPE] START END: a known FS-TYPE, numbers in parted's units ((site) an
  unknown unit suffix is refused: real parted reads it as its default unit, MB), inside the disk,
  end not before start, no overlap (parted's "closest location we can manage" message, rc 1);
  rm, name, set FLAG on|off, unit, print. An unknown command prints the usage and stops with
  status 0, as parted 3.5 does. Partition files appear next to the disk (nvme0n1p1, sda1) and
  go with mklabel, rm and wipefs of the disk
wipefs (misc-utils/wipefs.c): a device is given (rc 1) and exists (rc 1); without --force it
  must not be busy (O_EXCL: "Device or resource busy", rc 1); --all erases the partition table
  (without --force the table is re-read, so the partitions' files go) and the filesystem
  signature (a Lustre format is forgotten); a nested table on a partition needs --force
udevadm settle [--timeout=SECONDS]: the timeout parses as a systemd time span (rc 1)
"""

from __future__ import annotations

import importlib

from sitelib import register

#: tool -> (module, function). Every call of a stand-in is a new process, so a tool's module
#: is imported only when that tool runs: the others are not compiled for nothing.
STANDINS = {
    "mkfs.lustre": ("lustre_mkfs", "mkfs_lustre"),
    "mount": ("lustre_mount", "mount"),
    "umount": ("lustre_mount", "umount"),
    "lctl": ("lustre_lctl", "lctl"),
    "lfs": ("lustre_lfs", "lfs"),
    "parted": ("disk_tools", "parted"),
    "wipefs": ("disk_tools", "wipefs"),
    "udevadm": ("disk_tools", "udevadm"),
}


def _lazy(module: str, function: str):
    def standin(site, args):
        return getattr(importlib.import_module(module), function)(site, args)

    standin.__name__ = function
    return standin


for _tool, (_module, _function) in STANDINS.items():
    register(_tool)(_lazy(_module, _function))
