"""What the kernel has mounted, for tests that check real mounts."""


def mount_of(path):
    """The /proc/mounts fields (device, mount point, type, options, …) of `path`, or None."""
    for line in open("/proc/mounts"):
        fields = line.split()
        if fields[1] == str(path):
            return fields
    return None


def mounts():
    """Every mount point this process sees."""
    return [line.split()[1] for line in open("/proc/mounts")]


def swaps():
    """Every active swap file or device."""
    return [line.split()[0] for line in open("/proc/swaps").read().splitlines()[1:]]
