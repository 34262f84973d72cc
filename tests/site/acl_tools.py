"""The stand-in for setfacl, and a reader of access ACLs for the tests.

The lustre and daos playbooks close every directory on the way to a buffer's mounts to all but
its owner: `setfacl --set u::rwx,u:<uid>:--x,g::---,o::--- <dir>...`
(daccore.backends.lustre.passable_to). The stand-in writes the ACL for real, as libacl does
(the system.posix_acl_access extended attribute, which the kernel checks and folds into the
mode), so the kernel then decides who passes, and the tests probe the directories as real
other uids. The site's directory must be on a filesystem that keeps POSIX ACLs (ext4, xfs,
btrfs; tmpfs with CONFIG_TMPFS_POSIX_ACL); on one that does not, the stand-in refuses as
setfacl does ("Operation not supported").

Rules, from acl 2.3 (Debian 12 ships 2.3.1): tools/setfacl.c (main), tools/parse.c
(parse_acl_cmd, parse_acl_seq), tools/do_set.c (do_set), libacl/acl_check.c, acl_error.c,
acl_equiv_mode.c, acl_calc_mask.c, libmisc/uid_gid_lookup.c (get_id, get_uid), unquote.c:

  * argv: getopt_long with "-:bkndvhm:M:x:X:RLP" and its long options (abbreviations as
    glibc takes them). Options and files are taken in order: a file gets the operations given
    before it, and an option after a file starts a new list (so `-m A f1 -m B f2` gives f2
    only B). getopt prints nothing (":"); an unknown option, a missing argument, a file with
    no operation before it or operations with no file after them print the synopsis, exit 2;
    files already set stay set
  * -m/--modify ACL, -x/--remove ACL, --set ACL (the access ACL is replaced); -n/--no-mask,
    --mask; -v (version), -h (help), each ending the run with status 0
  * an ACL is entries separated by commas: [d[efault]:]u[ser]:[uid|name]:perms,
    g[roup]:[gid|name]:perms, m[ask][:]:perms, o[ther][:]:perms; a first word that is none of
    those tags names a user (`1234:x` is user 1234's entry). perms: r, w, x, X (x for a
    directory, or if some entry has x), '-', each letter at most once, or one octal digit;
    -x takes no perms. A bad entry: "setfacl: Option -m incomplete" (it ends early) or
    "setfacl: Option -m: Invalid argument near character N", exit 2 (--set is -s there)
  * a uid or gid as strtol(base 0) reads it (0x1f, 017), a negative one as its low 16 bits,
    else a name of this machine's user or group database
  * per file, in order: the file (a symlink given is followed) or "setfacl: F: No such file
    or directory"; its ACL (its mode's when it has none); the operations; then, unless the
    ACL is only the owner, group and other entries, a mask (the group entry's if none is
    there) recomputed as the union of the named and group entries, unless -n, or a mask was
    given without --mask; the ACL checked ("setfacl: F: Malformed access ACL `<acl>':
    Missing or wrong entry at entry N", also "Multiple entries of same type", "Duplicate
    entries"); written only when it changed. A file's failure is exit status 1 when it is the
    last file (2.3.1 exits with the last file's status), and the next file is still set; a
    filesystem without ACLs takes only an ACL a mode can say (chmod)

Not modelled, refused before anything changes with "setfacl: this site does not model ...",
exit 2, so a playbook that starts using them notices: default ACLs (-d, d: entries, -k, -b),
-R/-L/-P, -M/-X/--set-file/--restore, --test, file names read from standard input ("-").
POSIXLY_CORRECT is taken to be unset.
"""

from __future__ import annotations

import errno
import grp
import os
import pwd
import re
import stat
import struct
import sys
from dataclasses import dataclass

from gnu_getopt import OptionError, parse
from sitelib import Refused, Site, register

__all__ = ["setfacl", "access_acl", "VERSION"]

VERSION = "2.3.1"
SYNOPSIS = (
    "Usage: setfacl [-bkndRLP] { -m|-M|-x|-X ... } file ...\n"
    "Try `setfacl --help' for more information."
)
#: getopt_long's view of setfacl's options (tools/setfacl.c CMD_LINE_OPTIONS, long_options)
SPEC = [
    "set=",
    "set-file=",
    "mask",
    "R|recursive",
    "L|logical",
    "P|physical",
    "restore=",
    "test",
    "m|modify=",
    "M|modify-file=",
    "x|remove=",
    "X|remove-file=",
    "d|default",
    "n|no-mask",
    "b|remove-all",
    "k|remove-default",
    "v|version",
    "h|help",
]
#: options the site does not model: option -> how the refusal names it
UNMODELLED = {
    "set-file": "--set-file",
    "recursive": "-R",
    "logical": "-L",
    "physical": "-P",
    "restore": "--restore",
    "test": "--test",
    "modify-file": "-M",
    "remove-file": "-X",
    "default": "default ACLs (-d)",
    "remove-all": "-b (it removes the default ACL too)",
    "remove-default": "default ACLs (-k)",
}
#: the option letter setfacl names in a complaint about its ACL argument
LETTER = {"set": "s", "modify": "m", "remove": "x"}

# acl tags (sys/acl.h), in the order entries are kept; ACL_UNDEFINED_ID
USER_OBJ, USER, GROUP_OBJ, GROUP, MASK, OTHER = 0x01, 0x02, 0x04, 0x08, 0x10, 0x20
UNDEFINED = 0xFFFFFFFF
NAMED = (USER, GROUP)
READ, WRITE, EXECUTE, COND_EXECUTE = 4, 2, 1, 8
#: libacl's complaints about an ACL (acl_error.c), by acl_check's result
MULTI = "Multiple entries of same type"
DUPLICATE = "Duplicate entries"
MISSING = "Missing or wrong entry"
XATTR = "system.posix_acl_access"
_HEADER, _ENTRY = struct.Struct("=I"), struct.Struct("=HHI")  # linux/posix_acl_xattr.h

Acl = dict[tuple[int, int], int]  # (tag, id) -> perms; id UNDEFINED for unnamed entries


def _order(entry: tuple[int, int]) -> tuple[bool, int, int]:
    """libacl keeps entries by tag, then id; a named entry whose id is ACL_UNDEFINED_ID (uid
    4294967295) stays last, where acl_check finds it out of place."""
    tag, ident = entry
    return tag in NAMED and ident == UNDEFINED, tag, ident


@dataclass(frozen=True)
class Cmd:
    """One operation of the list (tools/sequence.h): replace or remove an entry, or empty the
    access ACL (--set)."""

    op: str  # "replace" | "remove" | "clear"
    tag: int = 0
    id: int = UNDEFINED
    perm: int = 0
    default: bool = False


class BadAcl(Exception):
    """parse_acl_seq's failure: where it stopped in the text."""

    def __init__(self, at: int):
        super().__init__(at)
        self.at = at


@register("setfacl")
def setfacl(site: Site, args: list[str]) -> int:
    """`setfacl {--set|-m|-x} ACL [-n|--mask] FILE...`, in order, on the site's real files."""
    usage_error = False
    try:
        items, rest = parse(args, SPEC, in_order=True)
    except OptionError as e:
        items, rest, usage_error = e.found, [], True
    items += [("", f) for f in rest]  # after `--`: files, with the operations so far
    _refuse_unmodelled(items)
    complaints: list[str] = []
    status = _run(items, usage_error, complaints)
    if status:
        raise Refused("\n".join(complaints), status, whole=True)
    if complaints:  # an earlier file failed, the last one did not: said, yet exit status 0
        print("\n".join(complaints), file=sys.stderr)
    return 0


def _refuse_unmodelled(items: list[tuple[str, str | None]]) -> None:
    for name, value in items:
        if name == "" and value == "-":
            raise Refused("this site does not model file names on standard input (-)", 2)
        if name in UNMODELLED:
            raise Refused(f"this site does not model {UNMODELLED[name]}", 2)
        if name in LETTER:
            try:
                cmds = parse_acl(value or "", name)
            except BadAcl:
                continue  # setfacl's own complaint, in its turn
            if any(c.default for c in cmds):
                raise Refused("this site does not model default ACLs (d: entries)", 2)


def _run(items: list[tuple[str, str | None]], usage_error: bool, complaints: list[str]) -> int:
    seq: list[Cmd] = []
    recalculate, saw_files, status = 0, False, 0
    for name, value in items:
        if name and saw_files:  # an option after a file: a new list of operations
            seq, saw_files = [], False
        if name == "version":
            print(f"setfacl {VERSION}")
            return 0
        if name == "help":
            print(f"setfacl {VERSION} -- set file access control lists\n{SYNOPSIS.splitlines()[0]}")
            return 0
        if name == "no-mask":
            recalculate = -1
        elif name == "mask":
            recalculate = 1
        elif name in LETTER:
            text = value or ""
            try:
                cmds = parse_acl(text, name)
            except BadAcl as e:
                letter = LETTER[name]
                complaints.append(
                    f"setfacl: Option -{letter} incomplete"
                    if e.at >= len(text)
                    else f"setfacl: Option -{letter}: Invalid argument near character {e.at + 1}"
                )
                return 2
            if name == "set" and any(c.op == "replace" for c in cmds):
                cmds.insert(0, Cmd("clear"))  # only when it names access entries
            seq += cmds
        else:  # a file
            if not seq:
                complaints.append(SYNOPSIS)
                return 2
            saw_files = True
            # 2.3.1: the last file's status is setfacl's (`status = next_file(...)`; later
            # releases keep the first failure's)
            status = set_file(value or "", seq, recalculate, complaints)
    if usage_error or not saw_files:
        complaints.append(SYNOPSIS)
        return 2
    return status


# --- the ACL text (tools/parse.c) ---

_WS = " \t\n\r"


def _at(text: str, i: int) -> str:
    return text[i] if i < len(text) else "\0"


def _skip_ws(text: str, i: int) -> int:
    while _at(text, i) in _WS and i < len(text):
        i += 1
    return i


def _skip_tag_name(text: str, i: int, token: str) -> int | None:
    """Where the text goes on after the tag `token` (or its first letter) and its colon, or
    None when it is not that tag."""
    t = _skip_ws(text, i)
    if text.startswith(token, t):
        t += len(token)
    elif _at(text, t) == token[0]:
        t += 1
    else:
        return None
    t = _skip_ws(text, t)
    if _at(text, t) == ":":
        return t + 1
    if _at(text, t) in ",\0":
        return t
    return None


def _get_token(text: str, i: int) -> tuple[str | None, int]:
    b = _skip_ws(text, i)
    e = b
    while _at(text, e) not in "\0\r\n:,":
        e += 1
    token = text[b:e].rstrip(_WS) if e > b else None
    return token, e + 1 if _at(text, e) == ":" else e


def _unquote(s: str) -> str:
    """__acl_unquote: a backslash and three octal digits is that character."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), s)


def _get_id(token: str) -> int | None:
    """get_id: strtol(token, &end, 0), all of it a number; a negative one is 16 bits."""
    m = re.fullmatch(r"[ \t\n\v\f\r]*([+-]?)(0[xX][0-9a-fA-F]+|0[0-7]*|[1-9][0-9]*)", token)
    if not m:
        return None
    sign, digits = m.groups()
    if digits[:2] in ("0x", "0X"):
        value = int(digits, 16)
    else:
        value = int(digits, 8 if digits.startswith("0") else 10)
    if sign == "-" and value:
        value = -value & 0xFFFF
    return value & 0xFFFFFFFF


def _lookup(token: str, group: bool) -> int | None:
    number = _get_id(token)
    if number is not None:
        return number
    try:
        return grp.getgrnam(token).gr_gid if group else pwd.getpwnam(token).pw_uid
    except KeyError:
        return None


def _parse_cmd(text: str, i: int, option: str) -> tuple[Cmd, int]:
    """parse_acl_cmd: one entry from `i`; BadAcl(where it stopped) when it is not one."""
    with_perm = option != "remove"
    default = False
    after = _skip_tag_name(text, i, "default")
    if after is not None:
        default, i = True, after
    tag, qualifier = 0, UNDEFINED
    c = _at(text, i)
    if c in "om":
        after = _skip_tag_name(text, i, "other" if c == "o" else "mask")
        if after is not None:
            i = _skip_ws(text, after)
            if _at(text, i) == ":":
                i += 1
            tag = OTHER if c == "o" else MASK
    if c == "g":
        after = _skip_tag_name(text, i, "group")
        if after is not None:
            token, rest = _get_token(text, after)
            if token is None:
                tag, i = GROUP_OBJ, rest
            else:
                gid = _lookup(_unquote(token), group=True)
                if gid is None:
                    raise BadAcl(after)
                tag, qualifier, i = GROUP, gid, rest
    if tag == 0:  # user:, u:, or a first word that is no tag: a user's entry
        if c == "u":
            after = _skip_tag_name(text, i, "user")
            i = i if after is None else after
        token, rest = _get_token(text, i)
        if token is None:
            tag, i = USER_OBJ, rest
        else:
            uid = _lookup(_unquote(token), group=False)
            if uid is None:
                raise BadAcl(i)
            tag, qualifier, i = USER, uid, rest
    i = _skip_ws(text, i)
    if _at(text, i) in ",\0":
        if not with_perm:
            return Cmd("remove", tag, qualifier, default=default), i
        raise BadAcl(i)
    if not with_perm:
        return Cmd("remove", tag, qualifier, default=default), i
    perm, i = _parse_perm(text, i)
    return Cmd("replace", tag, qualifier, perm, default), i


def _parse_perm(text: str, i: int) -> tuple[int, int]:
    if "0" <= _at(text, i) <= "7":
        while _at(text, i) == "0":
            i += 1
        if "1" <= _at(text, i) <= "7":
            return int(text[i]), i + 1
        return 0, i
    perm, count = 0, 0
    letters = {"r": READ, "w": WRITE, "x": EXECUTE, "X": COND_EXECUTE}
    while True:
        c = _at(text, i)
        if c in letters:
            if perm & letters[c]:
                raise BadAcl(i)
            perm |= letters[c]
        elif c != "-":
            if count == 0:
                raise BadAcl(i)
            return perm, i
        count, i = count + 1, i + 1


def parse_acl(text: str, option: str) -> list[Cmd]:
    """parse_acl_seq: the entries of an -m, -x or --set argument (option: "modify", "remove"
    or "set"), or BadAcl."""
    cmds, i = [], 0
    while i < len(text):
        cmd, i = _parse_cmd(text, i, option)
        cmds.append(cmd)
        i = _skip_ws(text, i)
        if _at(text, i) != ",":
            break
        i += 1
    if i < len(text):
        raise BadAcl(i)
    return cmds


# --- one file (tools/do_set.c) ---


def set_file(path: str, seq: list[Cmd], recalculate: int, complaints: list[str]) -> int:
    """do_set on one file: 0, or 1 with setfacl's complaint."""
    try:
        st = os.stat(path)
        old = _read(path, st.st_mode)
    except OSError as e:
        complaints.append(f"setfacl: {path}: {e.strerror}")
        return 1
    acl, mask_given = dict(old), False
    for cmd in seq:
        mask_given = mask_given or cmd.tag == MASK
        perm = cmd.perm
        if perm & COND_EXECUTE:
            perm &= ~COND_EXECUTE
            if stat.S_ISDIR(st.st_mode) or any(p & EXECUTE for p in acl.values()):
                perm |= EXECUTE
        if cmd.op == "clear":
            acl = {}
        elif cmd.op == "replace":
            acl[(cmd.tag, cmd.id)] = perm
        else:
            acl.pop((cmd.tag, cmd.id), None)
    if not _equiv_mode(acl):
        if not mask_given and (MASK, UNDEFINED) not in acl and (GROUP_OBJ, UNDEFINED) in acl:
            acl[(MASK, UNDEFINED)] = acl[(GROUP_OBJ, UNDEFINED)]
        if recalculate != -1 and (not mask_given or recalculate == 1):
            acl[(MASK, UNDEFINED)] = _union(acl)
    problem = _check(acl)
    if problem:
        error, entry = problem
        complaints.append(
            f"setfacl: {path}: Malformed access ACL `{_text(acl)}': {error} at entry {entry + 1}"
        )
        return 1
    if acl == old:
        return 0
    try:
        os.setxattr(path, XATTR, _encode(acl))
    except OSError as e:
        if e.errno == errno.EOPNOTSUPP and _equiv_mode(acl):
            os.chmod(path, _mode(acl) | (st.st_mode & 0o7000))
            return 0
        complaints.append(f"setfacl: {path}: {e.strerror}")
        return 1
    return 0


def _read(path: str, mode: int) -> Acl:
    """acl_get_file: the access ACL, or the one the mode says when there is none."""
    try:
        return _decode(os.getxattr(path, XATTR))
    except OSError as e:
        if e.errno not in (errno.ENODATA, errno.EOPNOTSUPP):
            raise
    return {
        (USER_OBJ, UNDEFINED): (mode >> 6) & 7,
        (GROUP_OBJ, UNDEFINED): (mode >> 3) & 7,
        (OTHER, UNDEFINED): mode & 7,
    }


def _equiv_mode(acl: Acl) -> bool:
    return not any(tag in (USER, GROUP, MASK) for tag, _ in acl)


def _union(acl: Acl) -> int:
    """acl_calc_mask: what the named entries and the owning group hold."""
    out = 0
    for (tag, _), perm in acl.items():
        if tag in (USER, GROUP_OBJ, GROUP):
            out |= perm
    return out


def _mode(acl: Acl) -> int:
    group = acl.get((MASK, UNDEFINED), acl.get((GROUP_OBJ, UNDEFINED), 0))
    return acl.get((USER_OBJ, UNDEFINED), 0) << 6 | group << 3 | acl.get((OTHER, UNDEFINED), 0)


def _check(acl: Acl) -> tuple[str, int] | None:
    """acl_check over the entries in libacl's order: (the complaint, the entry's index)."""
    state, qualifier, needs_mask = USER_OBJ, 0, False
    for last, (tag, ident) in enumerate(sorted(acl, key=_order)):
        if tag == USER_OBJ:
            if state != USER_OBJ:
                return MULTI, last
            state, qualifier = USER, 0
        elif tag in NAMED:
            if state != tag:
                return MISSING, last
            if ident < qualifier or ident == UNDEFINED:
                return DUPLICATE, last
            qualifier, needs_mask = ident + 1, True
        elif tag == GROUP_OBJ:
            if state == USER:
                state, qualifier = GROUP, 0
            else:
                return (MULTI if state >= GROUP else MISSING), last
        elif tag == MASK:
            if state == GROUP:
                state = OTHER
            else:
                return (MULTI if state >= OTHER else MISSING), last
        elif tag == OTHER:
            if state == OTHER or (state == GROUP and not needs_mask):
                state = 0
            else:
                return MISSING, last
    return None if state == 0 else (MISSING, len(acl))


def _text(acl: Acl) -> str:
    """acl_to_any_text(acl, NULL, ',', 0): full tag names, names for ids that have one."""
    words = {USER_OBJ: "user", USER: "user", GROUP_OBJ: "group", GROUP: "group", MASK: "mask"}
    out = []
    for (tag, ident), perm in sorted(acl.items(), key=lambda e: _order(e[0])):
        name = ""
        if tag == USER:
            name = _name(ident, group=False)
        elif tag == GROUP:
            name = _name(ident, group=True)
        out.append(f"{words.get(tag, 'other')}:{name}:{_perms(perm)}")
    return ",".join(out)


def _name(ident: int, group: bool) -> str:
    try:
        return grp.getgrgid(ident).gr_name if group else pwd.getpwuid(ident).pw_name
    except KeyError:
        return str(ident)


def _perms(perm: int) -> str:
    return "".join(c if perm & bit else "-" for c, bit in (("r", 4), ("w", 2), ("x", 1)))


def _encode(acl: Acl) -> bytes:
    entries = b"".join(_ENTRY.pack(tag, perm, ident) for (tag, ident), perm in sorted(acl.items()))
    return _HEADER.pack(2) + entries


def _decode(raw: bytes) -> Acl:
    return {
        (tag, ident if tag in NAMED else UNDEFINED): perm
        for tag, perm, ident in _ENTRY.iter_unpack(raw[_HEADER.size :])
    }


def access_acl(path: str) -> str | None:
    """A file's access ACL as `getfacl --omit-header --numeric` shows it, on one line
    (`u::rwx,u:1234:--x,g::---,m::--x,o::---`), or None when it has none (only its mode)."""
    try:
        raw = os.getxattr(path, XATTR)
    except OSError as e:
        if e.errno == errno.ENODATA:
            return None
        raise
    short = {USER_OBJ: "u", USER: "u", GROUP_OBJ: "g", GROUP: "g", MASK: "m", OTHER: "o"}
    return ",".join(
        f"{short[tag]}:{ident if tag in NAMED else ''}:{_perms(perm)}"
        for (tag, ident), perm in sorted(_decode(raw).items())
    )
