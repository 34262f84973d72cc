#!/bin/bash
# `make demo` on a fresh Debian 12: the issue's budget is <= 3 minutes including installs, and the
# machine dac is developed on already has everything installed, so this builds a fresh root with
# debootstrap (minbase: less than a cloud image has) and times `make demo` inside it, installs
# included. python3 and make are taken as given, as for anyone typing `make demo` after a clone.
#
#   bench/fresh_demo.sh [DIR]      (root; DIR default /var/tmp/dac-fresh, removed at the end)
#
# The chroot shares this kernel (loop devices, mounts) but gets its own mount namespace, so
# nothing it mounts leaks to the host; the repository goes in as a clean clone of HEAD.
set -eu
dir=${1:-/var/tmp/dac-fresh}
repo=$(cd "$(dirname "$0")/.." && pwd)
mirror=http://deb.debian.org/debian

if [ -e "$dir" ]; then
    echo "fresh_demo: $dir exists; remove it first" >&2
    exit 1
fi
command -v debootstrap >/dev/null || apt-get install -y -q debootstrap >/dev/null
cleanup() { [ -n "${KEEP:-}" ] || rm -rf --one-file-system "$dir" "$dir.debootstrap.log"; }  # KEEP=1: look inside after
trap cleanup EXIT

start=$(date +%s)
debootstrap --variant=minbase --include=make,python3,ca-certificates bookworm "$dir" "$mirror" \
    >"$dir.debootstrap.log" 2>&1
echo "debootstrap: $(( $(date +%s) - start )) s (not counted)"
# the same package sources as this machine (security updates included), in place of
# debootstrap's one-line list
if cp /etc/apt/sources.list.d/*.sources "$dir/etc/apt/sources.list.d/" 2>/dev/null; then
    rm -f "$dir/etc/apt/sources.list"
fi
cp /etc/resolv.conf "$dir/etc/resolv.conf"
cp /etc/hosts "$dir/etc/hosts"  # every installed machine has one (localhost); debootstrap none
# Where the network re-signs TLS (a sandbox's proxy), pip needs this machine's CA bundle; a real
# fresh machine reaches PyPI with Debian's own. Given as SSL_CERT_FILE, it is passed on.
ca_env=""
if [ -n "${SSL_CERT_FILE:-}" ] && [ -f "$SSL_CERT_FILE" ]; then
    cp "$SSL_CERT_FILE" "$dir/etc/ssl/certs/this-network.crt"
    ca_env="SSL_CERT_FILE=/etc/ssl/certs/this-network.crt PIP_CERT=/etc/ssl/certs/this-network.crt"
fi
git clone -q "$repo" "$dir/root/dac"

# Inside a private mount namespace: the chroot's mounts vanish with it, whatever happens.
unshare --mount --propagation private /bin/bash -eu -c '
    dir=$1
    mount --bind "$dir" "$dir"
    mount -t proc proc "$dir/proc"
    mount -t sysfs sys "$dir/sys"
    mount --rbind /sys/fs/cgroup "$dir/sys/fs/cgroup"  # as booted (systemd mounts it): slurmd needs it
    mount --rbind /dev "$dir/dev"
    mount -t tmpfs tmpfs "$dir/run"
    mount -t tmpfs tmpfs "$dir/tmp"
    chmod 1777 "$dir/tmp"
    chroot "$dir" /usr/bin/env -i HOME=/root TERM=dumb $2 \
        PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
        /bin/bash -c "cd /root/dac && s=\$(date +%s) && make demo && \
            echo \"make demo on a fresh Debian 12, installs included: \$(( \$(date +%s) - s )) s\""
' fresh_demo "$dir" "$ca_env"
