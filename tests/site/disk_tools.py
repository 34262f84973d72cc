"""Stand-ins for the disk tools the Lustre playbooks run: parted, wipefs, udevadm.

They keep the device state described in disk_state.py. A placeholder's size is the disk's size;
an empty one stands for a 1 TiB disk. What each stand-in checks is listed in lustre_tools.py.
"""

from __future__ import annotations

import os
import re
import sys

from disk_state import busy, device, devices, partition_of, partition_path, signatures
from gnu_getopt import OptionError, parse
from sitelib import Refused, Site

__all__ = ["parted", "wipefs", "udevadm"]

SECTOR = 512
NOMINAL_DISK = 1 << 40  # an empty placeholder file stands for a 1 TiB disk


# --- udevadm ------------------------------------------------------------------------------

_SEC_UNITS = (
    r"(us|usec|ms|msec|s|sec|second|seconds|m|min|minute|minutes|h|hr|hour|hours|"
    r"d|day|days|w|week|weeks|M|month|months|y|year|years)?"
)


def udevadm(site: Site, args: list[str]) -> int:
    """`udevadm settle [--timeout=SECONDS] [--exit-if-exists=FILE]`; no other verb is modelled."""
    if not args or args[0].startswith("-"):
        raise Refused("this site models only 'udevadm settle'")
    verb, rest = args[0], args[1:]
    if verb != "settle":
        known = {
            "info",
            "trigger",
            "control",
            "monitor",
            "test",
            "test-builtin",
            "verify",
            "wait",
            "lock",
            "hwdb",
            "cat",
        }
        raise Refused(
            f"this site models only 'udevadm settle', not '{verb}'"
            if verb in known
            else f"Unknown command verb '{verb}'."
        )
    try:
        options, _ = parse(
            rest,
            [
                "t|timeout=",
                "E|exit-if-exists=",
                "h|help",
                "V|version",
                "s|seq-start=",
                "e|seq-end=",
                "q|quiet",
            ],
        )
    except OptionError as e:
        raise Refused(str(e)) from None
    for name, value in options:
        # systemd's parse_sec(): numbers with optional units, several summed, or "infinity"
        if (
            name == "timeout"
            and value != "infinity"
            and not re.fullmatch(rf"(\s*\d+(\.\d+)?\s*{_SEC_UNITS})+\s*", value or "")
        ):
            raise Refused(f"Failed to parse timeout value '{value}': Invalid argument")
    return 0


# --- wipefs -------------------------------------------------------------------------------

_WIPEFS = [
    "a|all",
    "b|backup",
    "f|force",
    "h|help",
    "lock=?",
    "n|no-act",
    "o|offset=",
    "p|parsable",
    "q|quiet",
    "t|types=",
    "V|version",
    "J|json",
    "i|noheadings",
    "O|output=",
]


def _type_filter(pattern: str | None):
    if not pattern:
        return lambda kind: True
    negate = pattern.startswith("no")
    names = {name[2:] if negate and name.startswith("no") else name for name in pattern.split(",")}
    return lambda kind: (kind in names) != negate


def wipefs(site: Site, args: list[str]) -> int:
    """`wipefs [--all] [--force] [--no-act] [--quiet] [--types LIST] DEVICE...`."""
    try:
        options, devs = parse(args, _WIPEFS)
    except OptionError as e:
        raise Refused(f"{e}\nTry 'wipefs --help' for more information.") from None
    opts = dict(options)
    used = [name for name in ("output", "all", "offset") if name in opts]
    if len(used) > 1:
        raise Refused("mutually exclusive arguments: --output --all --offset")
    if "help" in opts or "version" in opts:
        print("wipefs from util-linux 2.38.1")
        return 0
    if not devs:
        raise Refused("no device specified\nTry 'wipefs --help' for more information.")
    if "offset" in opts:
        raise Refused("this site models only whole-device erasure (--all), not --offset")
    wanted = _type_filter(opts.get("types"))
    error: Refused | None
    with site.state() as state:
        try:
            for path in map(os.path.abspath, devs):
                _wipe_one(state, site.host, path, opts, wanted)
        except Refused as refusal:
            error = refusal  # the devices before this one stay wiped, as with the real tool
        else:
            error = None
    if error:
        raise error
    return 0


def _wipe_one(state: dict, host: str, path: str, opts: dict, wanted) -> None:
    if not os.path.exists(path):
        raise Refused(f"error: {path}: probing initialization failed: No such file or directory")
    dev = device(state, host, path)
    found = [sig for sig in signatures(dev) if wanted(sig[0])]
    if "all" not in opts:  # no --all: only list what is there (a read-only open)
        print("DEVICE OFFSET TYPE UUID LABEL")
        for kind, offset, _ in found:
            print(f"{os.path.basename(path)} {offset} {kind}")
        return
    # to erase, wipefs opens the device O_EXCL, which fails while it (or a partition of it) is
    # in use; --force drops O_EXCL, and then it erases a mounted device
    if "force" not in opts and busy(state, host, path):
        raise Refused(f"error: {path}: probing initialization failed: Device or resource busy")
    nested = partition_of(state, host, path) is not None
    erase_table = skipped = False
    for kind, offset, magic in found:
        is_table = kind in ("gpt", "PMBR", "dos")
        if is_table and nested and "force" not in opts:
            print(
                f'wipefs: {path}: ignoring nested "{kind}" partition table on non-whole disk '
                "device",
                file=sys.stderr,
            )
            skipped = True
            continue
        erase_table |= is_table
        if "quiet" not in opts:
            print(
                f"{path}: {len(magic.split())} bytes were erased at offset {offset} ({kind}): "
                f"{magic}"
            )
    if skipped:
        print("wipefs: Use the --force option to force erase.", file=sys.stderr)
    if "no-act" in opts:
        return
    if any(sig[0] == (dev["fs"] or {}).get("type") for sig in found):
        dev["fs"] = None
    if erase_table:
        dev["label"] = None
        # only an exclusive open re-reads the partition table; under --force the kernel keeps
        # the old partitions (their device nodes stay) until something re-reads it
        if "force" not in opts:
            _drop_partitions(state, host, dev)


def _drop_partitions(state: dict, host: str, dev: dict) -> None:
    for part in dev["parts"]:
        if os.path.exists(part["path"]):
            os.unlink(part["path"])
        devices(state, host).pop(part["path"], None)
    dev["parts"] = []


# --- parted -------------------------------------------------------------------------------

_PARTED = ["h|help", "l|list", "m|machine", "j|json", "s|script", "f|fix", "v|version", "a|align="]
_USAGE = "Usage: parted [-hlmsfv] [-a<align>] [DEVICE [COMMAND [PARAMETERS]]...]"
LABELS = {"aix", "amiga", "bsd", "dvh", "gpt", "mac", "msdos", "pc98", "sun", "atari", "loop"}
FS_TYPES = {
    "zfs",
    "udf",
    "btrfs",
    "nilfs2",
    "ext4",
    "ext3",
    "ext2",
    "f2fs",
    "fat32",
    "fat16",
    "hfsx",
    "hfs+",
    "hfs",
    "jfs",
    "swsusp",
    "linux-swap(v1)",
    "linux-swap(v0)",
    "ntfs",
    "reiserfs",
    "freebsd-ufs",
    "hp-ufs",
    "sun-ufs",
    "xfs",
    "apfs2",
    "apfs1",
    "asfs",
    "amufs5",
    "amufs4",
    "amufs3",
    "amufs2",
    "amufs1",
    "amufs0",
    "amufs",
    "affs7",
    "affs6",
    "affs5",
    "affs4",
    "affs3",
    "affs2",
    "affs1",
    "affs0",
    "linux-swap",
    "linux-swap(new)",
    "linux-swap(old)",
}
FLAGS = {
    "boot",
    "root",
    "swap",
    "hidden",
    "raid",
    "lvm",
    "lba",
    "hp-service",
    "palo",
    "prep",
    "msftres",
    "bios_grub",
    "atvrecv",
    "diag",
    "legacy_boot",
    "msftdata",
    "irst",
    "esp",
    "chromeos_kernel",
    "bls_boot",
    "linux-home",
    "no_automount",
}
#: unit name (lower case) -> bytes; percent and sectors are handled apart
UNITS = {
    "b": 1,
    "kb": 1000,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "kib": 1 << 10,
    "mib": 1 << 20,
    "gib": 1 << 30,
    "tib": 1 << 40,
}
UNIT_NAMES = {
    "s",
    "b",
    "kb",
    "mb",
    "gb",
    "tb",
    "compact",
    "cyl",
    "chs",
    "%",
    "kib",
    "mib",
    "gib",
    "tib",
}
SHOWN = {
    "b": "B",
    "kb": "kB",
    "mb": "MB",
    "gb": "GB",
    "tb": "TB",
    "kib": "KiB",
    "mib": "MiB",
    "gib": "GiB",
    "tib": "TiB",
}
#: location suffixes parted reads (parse_unit_suffix looks at the first letter or two)
SUFFIXES = {
    "s": "s",
    "b": "b",
    "k": "kb",
    "kb": "kb",
    "m": "mb",
    "mb": "mb",
    "g": "gb",
    "gb": "gb",
    "t": "tb",
    "tb": "tb",
    "%": "%",
    "ki": "kib",
    "kib": "kib",
    "mi": "mib",
    "mib": "mib",
    "gi": "gib",
    "gib": "gib",
    "ti": "tib",
    "tib": "tib",
}
#: commands real parted has that this site does not model
UNMODELLED = {"resizepart", "rescue", "select", "toggle", "disk_set", "disk_toggle"}


class _Stop(Exception):
    """Parted stopped reading commands; rc and message say how (rc 0: quietly)."""

    def __init__(self, message: str = "", rc: int = 1):
        super().__init__(message)
        self.message, self.rc = message, rc


def compact(nbytes: int) -> str:
    """A size as parted prints it in its default 'compact' unit (ped_unit_format_custom_byte)."""
    for size, name in ((10**12, "TB"), (10**9, "GB"), (10**6, "MB"), (10**3, "kB")):  # noqa: B007
        if nbytes >= 10 * size:
            break
    else:
        size, name = 1, "B"
    value = nbytes / size
    rounded = value + (0.005 if value < 10 else 0.05 if value < 100 else 0.5)
    places = 2 if rounded < 10 else 1 if rounded < 100 else 0
    return f"{value:.{places}f}{name}"


def parted(site: Site, args: list[str]) -> int:
    """`parted [--script] DEVICE COMMAND...` with mklabel, mkpart, rm, name, set, unit, print."""
    try:
        options, operands = parse(args, _PARTED)
    except OptionError as e:
        raise Refused(f"{e}\n{_USAGE}") from None
    opts = dict(options)
    if "help" in opts:
        print(_USAGE)
        return 0
    if "version" in opts:
        print("parted (GNU parted) 3.5")
        return 0
    align = opts.get("align")
    choices = ("none", "cylinder", "minimal", "optimal")  # XARGMATCH takes any unique prefix
    if align is not None and (not align or not any(c.startswith(align) for c in choices)):
        raise Refused(
            f"invalid argument '{align}' for '--align'\nValid arguments are:\n"
            "  - 'none'\n  - 'cylinder'\n  - 'minimal'\n  - 'optimal'\n" + _USAGE
        )
    if "list" in opts or "json" in opts:
        raise Refused("this site does not model 'parted --list' or '--json'")
    if len(operands) < 2:
        raise Refused("this site does not model interactive parted: give a device and commands")
    disk = os.path.abspath(operands[0])
    if not os.path.exists(disk):
        raise Refused(
            f"Error: Could not stat device {operands[0]} - No such file or directory.", whole=True
        )
    session = _Session(site, disk, script="script" in opts, machine="machine" in opts)
    with site.state() as state:
        try:
            session.run(state, operands[1:])
            stop = None
        except _Stop as e:
            stop = e  # earlier commands were committed one by one, as parted commits them
    if stop and stop.rc:
        raise Refused(stop.message, stop.rc, whole=True)
    return 0


class _Session:
    """One parted invocation: commands run in order against one disk."""

    def __init__(self, site: Site, disk: str, script: bool, machine: bool):
        self.site, self.disk, self.script, self.machine = site, disk, script, machine
        size = os.path.getsize(disk) or NOMINAL_DISK
        self.length = size // SECTOR
        self.unit = "compact"

    def run(self, state: dict, words: list[str]) -> None:
        self.dev = device(state, self.site.host, self.disk)
        self.state = state
        self.words = list(words)
        while self.words:
            command = self.words.pop(0)
            if command in ("mklabel", "mktable"):
                self.mklabel()
            elif command == "mkpart":
                self.mkpart()
            elif command == "rm":
                self.rm()
            elif command in ("name", "set"):
                getattr(self, command)()
            elif command == "unit":
                self.set_unit()
            elif command == "print":
                self.print_table()
            elif command == "align-check":
                self.need(2)
                print(f"{self.words.pop(1)} aligned")
                self.words.pop(0)
            elif command == "quit":
                return
            elif command in ("help", "version"):
                print(_USAGE if command == "help" else "parted (GNU parted) 3.5")
            elif command in UNMODELLED:
                raise _Stop(f"parted: this site does not model the '{command}' command")
            else:  # parted 3.5 prints its usage and exits 0, ignoring the rest
                print(_USAGE)
                raise _Stop(rc=0)

    def need(self, count: int) -> None:
        # a missing parameter makes script-mode parted prompt, read nothing and fail silently
        if len(self.words) < count:
            raise _Stop()

    def token(self, expected: str, valid) -> str:
        self.need(1)
        word = self.words.pop(0)
        if word not in valid:
            raise _Stop(f"parted: invalid token: {word}\nError: Expecting {expected}.")
        return word

    def mklabel(self) -> None:
        if not self.words:
            raise _Stop("Error: Expecting a disk label type.")
        label = self.token("a disk label type", LABELS)
        if busy(self.state, self.site.host, self.disk):
            raise _Stop(f"Error: Partition(s) on {self.disk} are being used.")
        if self.dev["label"] and not self.script:
            raise _Stop(
                f"Warning: The existing disk label on {self.disk} will be destroyed and "
                "all data on this disk will be lost. Do you want to continue?\n"
                "Yes/No? (no answer: stdin is not a terminal)"
            )
        _drop_partitions(self.state, self.site.host, self.dev)
        self.dev["label"] = label
        if label == "gpt":  # the GPT header and entries overwrite an ext4 superblock
            self.dev["fs"] = None

    def mkpart(self) -> None:
        label = self.dev["label"]
        if label is None:
            raise _Stop(f"Error: {self.disk}: unrecognised disk label")
        if label not in ("gpt", "msdos"):
            raise _Stop(f"parted: this site models partitions on gpt and msdos labels, not {label}")
        if label == "msdos":
            name = ""
            if self.token("a partition type", {"primary", "logical", "extended"}) != "primary":
                raise _Stop("parted: this site models only primary msdos partitions")
        else:
            self.need(1)
            name = self.words.pop(0)
            if not name:
                raise _Stop()
        self.need(1)
        fs_type = None
        if not self.words[0][:1].isdigit():  # parted's own test for "is this START?"
            fs_type = self.token("a file system type", FS_TYPES)
        self.need(2)
        start_word, end_word = self.words.pop(0), self.words.pop(0)
        start = self.location(start_word, is_end=False)
        end = self.location(end_word, is_end=True)
        if end - start + 1 < 0:
            raise _Stop(
                f"Error: Can't have the end before the start! (start sector={start} "
                f"length={end - start + 1})"
            )
        first, last = (34, self.length - 34) if label == "gpt" else (1, self.length - 1)
        start, end = max(start, first), min(end, last)
        self.check_free(start, end, first, last)
        self.add_partition(label, name, fs_type, start, end)

    def location(self, word: str, is_end: bool) -> int:
        """A START or END word as a sector (ped_unit_parse_custom), range-checked."""
        match = re.fullmatch(r"(-?[0-9]*\.?[0-9]*)([A-Za-z%]*)", word)
        if not match or match.group(1) in ("", "-", ".", "-."):
            raise _Stop("Error: Invalid number.")
        number, suffix = float(match.group(1)), match.group(2).lower()
        default = "mb" if self.unit == "compact" else self.unit
        unit = SUFFIXES.get(suffix) if suffix else default
        if unit is None or unit in ("cyl", "chs"):
            # real parted silently reads an unknown suffix as its default unit (MB); a typo
            # there is never what a playbook means, so the site refuses it
            raise _Stop(
                f"Error: \"{word}\": '{match.group(2)}' is not a unit this site "
                "models (real parted would silently read it as MB)."
            )
        if 0 < number < 1:
            raise _Stop("Error: Use a smaller unit instead of a value < 1")
        radius: float
        if unit == "s":
            sector, radius = number, 0
        elif unit == "%":
            sector, radius = number * self.length / 100, self.length / 200 - 1
        else:
            size = UNITS[unit]
            sector = number * size / SECTOR
            # IEC units are exact positions; the others stand for a range around the value
            radius = 0 if unit.endswith("ib") else max(-(-size // SECTOR) / 2 - 1, 0)
        if match.group(1).startswith("-"):
            sector += self.length
        if sector - radius > self.length - 1 or sector + radius < 0:
            raise _Stop(f"Error: The location {word} is outside of the device {self.disk}.")
        sector = int(sector)
        if is_end and unit not in ("s",) and sector > 0:
            sector -= 1  # an END names the first byte after the partition
        return min(max(sector, 0), self.length - 1)

    def check_free(self, start: int, end: int, first: int, last: int) -> None:
        """Refuse an overlap the way script-mode parted does, naming the nearest free room."""
        taken = sorted((p["start"], p["end"]) for p in self.dev["parts"])
        if not any(s <= end and start <= e for s, e in taken):
            return
        gaps, cursor = [], first
        for s, e in taken:
            if s > cursor:
                gaps.append((cursor, s - 1))
            cursor = max(cursor, e + 1)
        if cursor <= last:
            gaps.append((cursor, last))
        if not gaps:
            raise _Stop("Error: Unable to satisfy all constraints on the partition.")

        def fit(gap):
            lo, hi = max(gap[0], start), min(gap[1], end)
            if lo <= hi:
                return hi - lo, (lo, hi)
            edge = gap[1] if gap[1] < start else gap[0]
            return -abs(edge - start), (edge, edge)

        lo, hi = max(fit(gap) for gap in gaps)[1]
        raise _Stop(
            f"Error: You requested a partition from {compact(start * SECTOR)} to "
            f"{compact(end * SECTOR)} (sectors {start}..{end}).\n"
            f"The closest location we can manage is {compact(lo * SECTOR)} to "
            f"{compact(hi * SECTOR)} (sectors {lo}..{hi})."
        )

    def add_partition(self, label, name, fs_type, start, end) -> None:
        used = {p["number"] for p in self.dev["parts"]}
        limit = 128 if label == "gpt" else 4
        number = next((n for n in range(1, limit + 1) if n not in used), None)
        if number is None:
            raise _Stop(
                "Error: Too many primary partitions."
                if label == "msdos"
                else "Error: Unable to allocate a partition number."
            )
        path = partition_path(self.disk, number)
        with open(path, "a"):
            pass
        self.dev["parts"].append(
            {
                "number": number,
                "name": name,
                "fs_type": fs_type,
                "start": start,
                "end": end,
                "path": path,
                "flags": [],
            }
        )
        self.dev["parts"].sort(key=lambda p: p["number"])
        device(self.state, self.site.host, path)

    def partition(self) -> dict:
        self.need(1)
        word = self.words.pop(0)
        part = next((p for p in self.dev["parts"] if str(p["number"]) == word), None)
        if part is None:
            raise _Stop("Error: Partition doesn't exist.")
        return part

    def rm(self) -> None:
        part = self.partition()
        if busy(self.state, self.site.host, part["path"]):
            raise _Stop(
                f"Warning: Partition {part['path']} is being used. Are you sure you "
                "want to continue?"
            )
        if os.path.exists(part["path"]):
            os.unlink(part["path"])
        devices(self.state, self.site.host).pop(part["path"], None)
        self.dev["parts"].remove(part)

    def name(self) -> None:
        part = self.partition()
        self.need(1)
        part["name"] = self.words.pop(0)

    def set(self) -> None:
        part = self.partition()
        flag = self.token("a flag", FLAGS)
        state = self.token("a state", {"on", "off"})
        part["flags"] = sorted(set(part["flags"]) - {flag} | ({flag} if state == "on" else set()))

    def set_unit(self) -> None:
        self.need(1)
        word = self.words.pop(0)
        if word.lower() not in UNIT_NAMES:
            raise _Stop(f"parted: invalid token: {word}\nError: Expecting a unit.")
        self.unit = word.lower()

    def fmt(self, nbytes: int) -> str:
        """A byte position in the current unit, rounded down as parted prints it."""
        if self.unit == "s":
            return f"{nbytes // SECTOR}s"
        if self.unit in UNITS:
            return f"{nbytes / UNITS[self.unit]:.2f}{SHOWN[self.unit]}"
        return compact(nbytes)

    def print_table(self) -> None:
        size, label = self.fmt(self.length * SECTOR), self.dev["label"] or "unknown"
        rows = [
            (
                p["number"],
                self.fmt(p["start"] * SECTOR),
                self.fmt((p["end"] + 1) * SECTOR - 1),
                self.fmt((p["end"] - p["start"] + 1) * SECTOR),
                p["fs_type"] or "",
                p["name"],
                ", ".join(p["flags"]),
            )
            for p in self.dev["parts"]
        ]
        if self.machine:
            print(f"BYT;\n{self.disk}:{size}:file:512:512:{label}::;")
            for row in rows:
                print(":".join(map(str, row)) + ";")
            return
        print(
            f"Disk {self.disk}: {size}\nPartition Table: {label}\n\n"
            "Number  Start  End  Size  File system  Name  Flags"
        )
        for row in rows:
            print("  ".join(map(str, row)))
