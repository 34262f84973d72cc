"""LNet NIDs, parsed the way Lustre's user tools parse them.

Source: lustre-release lib/libcfs/nidstrings.c (libcfs_strnid, libcfs_str2net_internal, the
netstrfns table, libcfs_ip_str2addr[_size], libcfs_num_str2addr, cfs_nidstr_find_delimiter) and
lustre/utils/mount_utils.c (convert_hostnames, used by mkfs.lustre --mgsnode and mount.lustre).

A NID is `<address>[@<net><number>]`; without `@` it means `@tcp`. The net is matched by prefix
in the table's order (so `tcp1` is tcp net 1; `lo` takes no number). The address grammar depends
on the net: tcp and efa take an IPv4 address other than 127.0.0.1, an IPv6 address that is
neither loopback nor link-local, or a host name; o2ib and gip take a dotted quad or a host name;
gni, ptlf, kfi and bxi3f take a number (decimal or 0x-hex, 32 bits); lo takes anything. Host
names resolve only to the site's own hosts (their site.json "nid" address): the stand-ins never
ask DNS, so the result does not depend on the machine running the tests.

An MGS specification lists MGS nodes separated by ':', each node's NIDs separated by ','.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Callable

__all__ = ["BadNid", "parse_nid", "parse_nodes", "format_nodes"]

#: (net name, address grammar) in netstrfns order: the first prefix match wins
NETS = [
    ("lo", "any"),
    ("tcp", "ip"),
    ("o2ib", "ip4"),
    ("gni", "num"),
    ("gip", "ip4"),
    ("ptlf", "num"),
    ("kfi", "num"),
    ("efa", "ip"),
    ("bxi3f", "num"),
]

Resolver = Callable[[str], "str | None"]


class BadNid(ValueError):
    """The text is not a NID these tools would accept."""


def _net(text: str) -> tuple[str, int]:
    for name, grammar in NETS:
        if text.startswith(name):
            number = text[len(name) :]
            if not number:
                return name, 0
            if grammar == "any" or not number.isdigit() or int(number) > 0xFFFFFFFF:
                break
            return name, int(number)
    raise BadNid(text)


def _address(text: str, grammar: str, resolve: Resolver | None) -> str:
    if grammar == "any":
        return "0"
    if grammar == "num":
        if re.fullmatch(r"0[xX][0-9a-fA-F]+|[0-9]+", text) and int(text, 0) <= 0xFFFFFFFF:
            return str(int(text, 0))
        raise BadNid(text)
    if grammar == "ip4":  # sscanf("%u.%u.%u.%u"): leading zeros are fine
        quad = re.fullmatch(r"(\d+)\.(\d+)\.(\d+)\.(\d+)", text)
        if quad and all(int(part) <= 255 for part in quad.groups()):
            return ".".join(str(int(part)) for part in quad.groups())
    else:  # inet_pton, then refuse the loopback and link-local addresses
        try:
            addr = ipaddress.ip_address(text)
        except ValueError:
            addr = None
        if addr is not None:
            if str(addr) == "127.0.0.1" or (
                addr.version == 6 and (addr.is_loopback or addr.is_link_local)
            ):
                raise BadNid(text)
            return str(addr)
    if text[:1].isalpha() and resolve is not None:
        resolved = resolve(text)
        if resolved:
            return resolved
    raise BadNid(text)


def parse_nid(text: str, resolve: Resolver | None = None) -> str:
    """The canonical form of one NID (`10.0.0.1@tcp`, net number 0 left out), or BadNid."""
    address, at, net = text.partition("@")
    name, number = _net(net) if at else ("tcp", 0)
    grammar = dict(NETS)[name]
    canonical = _address(address, grammar, resolve)
    return f"{canonical}@{name}{number or ''}"


def _find_delimiter(text: str) -> int:
    """Where the first NID of text ends (cfs_nidstr_find_delimiter: ':' is also in IPv6)."""
    hex_count, is_ipv6 = 0, True
    i = 0
    while i < len(text) and text[i] not in ", ":
        char = text[i]
        if char == "@":
            while i < len(text) and text[i] not in ":, ":
                i += 1
            return i
        if (char in "0123456789abcdefABCDEF:") and hex_count <= 4 and is_ipv6:
            hex_count = 0 if char == ":" else hex_count + 1
        else:
            is_ipv6 = False
            if char == ":":
                return i
        i += 1
    return i


def parse_nodes(text: str, resolve: Resolver | None = None) -> list[list[str]]:
    """An MGS specification as nodes of canonical NIDs; BadNid names the NID that failed."""
    nodes: list[list[str]] = [[]]
    rest = text
    while True:
        end = _find_delimiter(rest)
        nid = rest[:end]
        try:
            nodes[-1].append(parse_nid(nid, resolve))
        except BadNid:
            raise BadNid(nid) from None
        if end >= len(rest):
            return nodes
        if rest[end] == ":":
            nodes.append([])
        rest = rest[end + 1 :]


def format_nodes(nodes: list[list[str]]) -> str:
    """The MGS specification back as text: `a@tcp,b@tcp:c@tcp`."""
    return ":".join(",".join(node) for node in nodes)
