#!/bin/bash
# The README's two commands on a fresh Debian 12 root, timed, installs included. The machine dac
# is developed on already has everything installed, so this builds a fresh root with debootstrap
# (minbase: less than a cloud image has, plus make, python3, git and ca-certificates, as anyone
# typing the commands after a clone has) and runs the command inside it.
#
#   bench/fresh_root.sh demo [DIR]   `make demo` (budget 3 min, installs included)
#   bench/fresh_root.sh test [DIR]   `.ci/run` as CI runs it (make lint, then make test with
#                                    CI=true; budget 45 min for make test on 2 cores); the first
#                                    make test on a machine builds the Slurm chroots and etcd
#   (root; DIR default /var/tmp/dac-fresh, removed at the end; KEEP=1 keeps it to look into)
#
# The fresh root shares this kernel (loop devices, mounts, network) but gets its own mount and pid
# namespaces: nothing it mounts is seen by the host, and every process it starts dies with it,
# even when the command's own teardown does not run. The repository goes in as a clean clone of
# HEAD. Where this network re-signs TLS, SSL_CERT_FILE (and the proxy variables) are passed on,
# as a site behind such a proxy would set them.
set -eu
what=${1:-}
case $what in
    demo) command="make demo" ;;
    test) command=".ci/run" ;;
    *) echo "usage: bench/fresh_root.sh demo|test [DIR]" >&2; exit 2 ;;
esac
dir=${2:-/var/tmp/dac-fresh}
case $dir in /*) ;; *) dir=$(pwd)/$dir ;; esac
repo=$(cd "$(dirname "$0")/.." && pwd)
mirror=http://deb.debian.org/debian

if [ -e "$dir" ]; then
    echo "fresh_root: $dir exists; remove it first" >&2
    exit 1
fi
command -v debootstrap >/dev/null || apt-get install -y -q debootstrap >/dev/null

# Loop devices are the kernel's, not the namespace's: a demo killed before its teardown leaves
# them attached to files in DIR. losetup shows their paths as the fresh root saw them (they may name
# a file of the host too), so they are matched by device and inode instead.
detach_our_loops() {
    [ -d "$dir" ] || return 0
    local dev ino majmin
    losetup -l -n -O NAME,BACK-INO,BACK-MAJ:MIN 2>/dev/null | while read -r dev ino majmin; do
        [ -n "$ino" ] && [ "$majmin" = "$(stat -c '%Hd:%Ld' "$dir")" ] || continue
        [ -z "$(find "$dir" -xdev -inum "$ino" -print -quit 2>/dev/null)" ] || losetup -d "$dev" || true
    done
}
cleanup() {
    detach_our_loops
    # The namespace's mounts died with it; this catches anything that went to the host's.
    findmnt -rn -o TARGET | grep -F "$dir/" | sort -r | while read -r m; do umount -l "$m" || true; done
    [ -n "${KEEP:-}" ] || rm -rf --one-file-system "$dir" "$dir.debootstrap.log"
}
trap cleanup EXIT

start=$(date +%s)
debootstrap --variant=minbase --include=make,python3,git,ca-certificates bookworm "$dir" "$mirror" \
    >"$dir.debootstrap.log" 2>&1 || { tail -20 "$dir.debootstrap.log"; exit 1; }
echo "debootstrap: $(( $(date +%s) - start )) s (not counted)"
# The same Debian sources as this machine (security updates included) in place of debootstrap's
# one-line list; only Debian's, since other repositories' keys are not in the fresh root.
if [ -f /etc/apt/sources.list.d/debian.sources ]; then
    cp /etc/apt/sources.list.d/debian.sources "$dir/etc/apt/sources.list.d/"
    rm -f "$dir/etc/apt/sources.list"
fi
cp /etc/resolv.conf "$dir/etc/resolv.conf"
cp /etc/hosts "$dir/etc/hosts"  # every installed machine has one (localhost); debootstrap none
# Where the network re-signs TLS (a sandbox's proxy), pip needs this machine's CA bundle; a real
# fresh machine reaches PyPI with Debian's own. Given as SSL_CERT_FILE, it is passed on.
net_env=""
if [ -n "${SSL_CERT_FILE:-}" ] && [ -f "$SSL_CERT_FILE" ]; then
    cp "$SSL_CERT_FILE" "$dir/etc/ssl/certs/this-network.crt"
    net_env="SSL_CERT_FILE=/etc/ssl/certs/this-network.crt"
fi
for v in http_proxy https_proxy no_proxy HTTP_PROXY HTTPS_PROXY NO_PROXY; do
    [ -z "${!v:-}" ] || net_env="$net_env $v=${!v}"
done
git clone -q "$repo" "$dir/root/dac"

# A booted Debian 12 has cgroup2 on /sys/fs/cgroup (systemd mounts it) and slurmd will not start
# without a cgroup filesystem there; a chroot has none, so it gets this machine's own (slurmd
# refuses a v1/v2 mix, so no fresh cgroup2 mount when this kernel also has v1 hierarchies).
unshare --mount --pid --fork --propagation private /bin/bash -eu -c '
    dir=$1
    # unshare --fork: this shell is pid 1 of the namespace; every mount below dies with it
    mount --bind "$dir" "$dir"
    mount -t proc proc "$dir/proc"
    mount -t sysfs sys "$dir/sys"
    mount --rbind /sys/fs/cgroup "$dir/sys/fs/cgroup"
    mount --rbind /dev "$dir/dev"  # loop devices appear in devtmpfs as the demo attaches them
    mount -t tmpfs tmpfs "$dir/run"
    mount -t tmpfs -o mode=1777 tmpfs "$dir/tmp"
    # the fresh root becomes the root of this namespace (pivot_root), not a chroot: the kernel
    # refuses a user namespace to a chrooted process, and tests make them (unshare --user)
    cd "$dir"
    mkdir -p .host-root
    pivot_root . .host-root
    umount -l /.host-root
    rmdir /.host-root
    # env -i: nothing of this machine (pip wheel dirs, proxies) helps the fresh one
    /usr/bin/env -i HOME=/root TERM=dumb $2 \
        PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
        /bin/bash -c "cd /root/dac && date +%s.%N > /var/tmp/fresh.start && $3 &&
                      date +%s.%N > /var/tmp/fresh.end"
' fresh_root "$dir" "$net_env" "$command"

# Where the time went, from what the command leaves behind: the venv is created right after the
# system packages (scripts/install-system-deps), .venv/.installed is touched after pip.
python3 - "$dir" "$command" <<'PY'
import os, sys
d, command = sys.argv[1], sys.argv[2]
t = lambda p: float(open(d + p).read()) if p.endswith(("start", "end")) else os.stat(d + p).st_mtime
s, venv, pip, e = (t("/var/tmp/fresh.start"), t("/root/dac/.venv/pyvenv.cfg"),
                   t("/root/dac/.venv/.installed"), t("/var/tmp/fresh.end"))
print(f"{command} on a fresh Debian 12, installs included: {e - s:.1f} s "
      f"(system packages {venv - s:.1f} s, venv + pip {pip - venv:.1f} s, "
      f"the rest {e - pip:.1f} s)")
PY
du -sh --one-file-system "$dir" | sed 's/^/the fresh root afterwards: /'
