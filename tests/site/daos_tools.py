"""Stand-ins for the DAOS 2.6 tools the daos playbooks run: dmg, daos, dfuse, fusermount3.

DAOS 2.6 is the one release they follow (site.json {"daos": {"release": "2.6"}}, the default).

What "checked" means. Each stand-in parses argv with the real tool's parser (go-flags for
dmg and daos, getopt_long for dfuse and fusermount3: argv_grammar.py) and enforces the rules
below with the real wording and exit status, before it changes the site's state. Sources:
daos-stack/daos at tag v2.6.5, libfuse 3.14 (Debian 12's fuse3). Modules: daos_dmg.py,
daos_client.py (daos, dfuse, fusermount3), daos_site.py (shared), daos_rules.py (grammars).

dmg (src/control/cmd/dmg/{main,pool,system}.go, lib/control/pool.go,
server/mgmt_pool.go, server/faults.go). Errors are "ERROR: dmg: <error>" (and a second
"ERROR: dmg: server: code = N resolution = ..." line for a control-plane fault), exit 1;
with -j/--json stdout carries {"response", "error", "status"} (status -1025 unless DAOS
answered a DER code).
    pool create [opts] <label>: the label is positional (there is no --label), valid per
    daos_label_is_valid (1-127 of [A-Za-z0-9.:_-], not a UUID) and unused (fault 609).
    --size is bytes with an optional SI or IEC suffix (200G, 1.5TB, 100GiB, 214748364800) or
    N% (1-100) of free space; it excludes --scm-size/--nvme-size; one of --size/--scm-size is
    required; --tier-ratio conflicts with N% and with manual sizes, --nranks with --ranks and
    with manual sizes. --ranks as ranklist parses it (0,1 / 0-3 / [0-3,5]); every rank must be
    a member (fault 606), --nranks at most the members (607), --nsvc at most
    min(ranks, 9) (608). At least 16 MiB SCM and, when NVMe is used, 1 GiB NVMe per target
    per rank (604/605); no more than the free capacity when site.json gives it (DER_NOSPACE).
    --user/--group are ACL principals ("name" gets its "@"); by default the caller and its
    primary group. New pools get DAOS's default ACL: A::OWNER@:rw, A:G:GROUP@:rw.
    pool update-acl --entry=<ACE> / delete-acl --principal=<p> <pool>: the ACE grammar of
    src/common/acl_util.c (A::user@:rw, A:G:group@:rw, A::OWNER@:rw, A:G:GROUP@:rw,
    A::EVERYONE@:r; a bad one is DER_INVAL), an entry replaces the principal's; delete-acl
    takes u:user@, g:group@, OWNER@, GROUP@, EVERYONE@ (acl_principal.c), and an absent entry
    is DER_NONEXIST.
    pool destroy [--force] [--recursive] <pool>: containers need --recursive (fault 618); a
    pool held open by a dfuse mount needs --force (DER_BUSY; forced, the mount stays, evicted);
    an unknown pool is 'pool destroy failed: unable to find pool service with label "x"'
    (not DER_NONEXIST), also on stdout as "Pool-destroy command failed: ...".
    Also pool query / list / get-acl and system query (every site rank, Joined).
    Site rule, stricter than DAOS (which stores any well-formed principal): pool owners and
    named ACE principals must resolve on this machine, so a typo or a bare uid fails here.
daos (src/control/cmd/daos/{main,container,pool,flags,property}.go; src/security/acl.c,
srv_acl.c). Same error and JSON conventions as dmg. Runs as the caller (os.getuid): its
AUTH_SYS identity is its user name and every group the user database gives it, as
daos_agent builds it. Access is the ACL evaluation of acl.c (owner entry, named user, union
of matching groups, EVERYONE@) with srv_acl.c's connect filters.
    container create [--type=T] <pool> [label]: positional pool then label (no --pool or
    --label); T in POSIX HDF5 PYTHON SPARK DATABASE ROOT SEISMIC METEO (and aliases); a
    read-write pool connect needs r|t and w|c|d, creating needs w|c (else DER_NO_PERM, raw
    for the connect, "failed to create container: ..." for the create); a used label is
    DER_EXIST. The container records owner, owner group, uid and DAOS's default container ACL.
    container destroy [--force] <pool> <cont>: pool delete rights (w|d) or container 'd';
    a container a dfuse mount holds open needs --force (DER_BUSY). container list <pool>.
dfuse (src/client/dfuse/dfuse_main.c, dfuse_core.c). Failures are reported on stdout
(e.g. "Failed to connect to pool: 2 (No such file or directory)" and then the waiting
parent's "Exiting -1005 DER_NONEXIST"), exit status -(rc + 1000): 1 no permission,
3 invalid, 5 not found. The stand-in prints those lines on stdout and, for the record, on
stderr. Option errors are getopt's, on stderr, with the usage and exit 3.
    --mountpoint=/-m, --pool=, --container= (there are no -p/-c; unambiguous prefixes such as
    --cont work) or positional <mountpoint> [<pool> <container>], or -o pool=X (only the first
    known key of each -o counts: parse_mount_option's loop breaks after it).
    A container needs a pool; the mount point must exist and be reachable; on an existing
    dfuse mount a given pool is 'Pool specified multiple ways'; the pool needs r|t (read-only
    connect); the container must exist, open read-write or read-only, and be POSIX. A
    non-root caller must reach the mount point (every directory above it passable: else
    "Error resolving mount point: 13 (Permission denied)"), enter it, and have write access
    to it (and own it when sticky), as fusermount3's check_perm demands. FUSE 3 mounts over
    non-empty directories, so a non-empty mount point is NOT refused. --enable-caching /
    --disable-caching: the last one given wins (dfuse_main.c:486-495); caching is on by
    default, and a file read through a caching mount is served from that mount's cache for
    600 s (dfuse_core.c:773) whatever another node wrote since: daos_files.py models those
    reads and writes for the tests.
fusermount3 (libfuse util/fusermount.c, lib/mount_util.c): -u, -z (needs -u), -q; one
mount point, its parent resolved. A non-root caller may only unmount an entry with its own
user_id ('fusermount3: entry for X not found in /etc/mtab'); then it chdirs to the mount
point's parent with the caller's own rights ('fusermount3: failed to chdir to P: Permission
denied', rc 1, even with -q: a directory above that does not let the caller pass, such as a
job's directory without its owner's ACL entry); root unmounting a non-mount gets 'failed to
unmount X: Invalid argument' (or 'No such file or directory'). While a process
of this machine has its cwd, root or an open file in the mount (read from /proc:
sitelib.holders) umount2(2) is EBUSY: 'failed to unmount X: Device or resource busy', rc 1;
-z (UMOUNT_DETACH, unmount_fuse_locked()) detaches it regardless.

Not modelled, refused loudly so a playbook that starts using them notices: dmg --properties,
--acl-file, --meta-size and the other pool subcommands; daos --path, --properties,
--acl-file and other subcommands; dfuse --foreground, --path and handle files.

site.json facts read: hosts.<h>.ranks (the DAOS system is their union, all Joined);
optionally hosts.<h>.targets (per engine, default 16) and scm_bytes / nvme_bytes (free bytes
per rank; nvme_bytes 0 means no NVMe; absent, capacity is unlimited and N% sizes refused).
State: state["daos"] = {"pools": {label: pool with its "acl" and "containers"},
"dfuse": {host: {resolved mount point: {"pool", "container", "uid", ...}}}}.
"""

from __future__ import annotations

import daos_client  # noqa: F401  (importing registers daos, dfuse and fusermount3)
import daos_dmg  # noqa: F401  (registers dmg)
