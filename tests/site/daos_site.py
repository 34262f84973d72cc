"""What the DAOS stand-ins share: errors in the Go tools' manner, the site's DAOS state, and
the access checks a client call (daos, dfuse) meets when it connects to a pool or opens a
container. See daos_tools.py for the rules and their sources.
"""

from __future__ import annotations

import json
import os
from typing import Callable

from argv_grammar import Command, FlagsError, Parsed, parse_goflags
from daos_rules import DER, Identity, der, effective_perms, is_uuid, parse_bytes, principal_ok
from sitelib import Refused, Site

__all__ = [
    "RELEASES",
    "release",
    "Fail",
    "status",
    "fault",
    "daos_state",
    "find_pool",
    "not_found",
    "run_go",
    "entity",
    "connect",
    "find_cont",
    "cont_open",
    "caller",
    "size_flag",
    "principal_flag",
    "opaque",
]


class Fail(Exception):
    """A Go tool's error: its text, the JSON status, an optional fault resolution, text the
    tool printed on stdout before failing, and the DER name when it is a DAOS status."""

    def __init__(
        self,
        message: str,
        status: int = DER["DER_MISC"][0],
        resolution: str = "",
        stdout: str = "",
        der_name: str = "",
    ):
        super().__init__(message)
        self.message, self.status, self.resolution, self.stdout, self.der = (
            message,
            status,
            resolution,
            stdout,
            der_name,
        )


def status(name: str, prefix: str = "") -> Fail:
    return Fail(prefix + der(name), DER[name][0], der_name=name)


def fault(code: int, description: str, resolution: str, prefix: str) -> Fail:
    """A control-plane fault (src/control/fault/fault.go) and its resolution line."""
    return Fail(
        f"{prefix}server: code = {code} description = {json.dumps(description)}",
        resolution=f"server: code = {code} resolution = {json.dumps(resolution)}",
    )


#: the DAOS releases the stand-ins follow; site.json {"daos": {"release": ...}} picks one
RELEASES = ("2.6",)


def release(site: Site) -> str:
    chosen = str(site.facts.get("daos", {}).get("release", "2.6"))
    if chosen not in RELEASES:
        raise Refused(
            f"stand-in: site.json daos.release '{chosen}' is not one of {', '.join(RELEASES)}", 2
        )
    return chosen


def daos_state(state: dict) -> dict:
    daos = state.setdefault("daos", {})
    daos.setdefault("pools", {})
    daos.setdefault("dfuse", {})
    return daos


def find_pool(daos: dict, ident: str) -> dict | None:
    return next((p for p in daos["pools"].values() if ident in (p["label"], p["uuid"])), None)


def not_found(ident: str) -> str:
    what = "uuid" if is_uuid(ident) else "label"
    return f"unable to find pool service with {what} {json.dumps(ident)}"


def run_go(
    tool: str,
    root: Command,
    handlers: dict,
    site: Site,
    args: list[str],
    check: Callable[[Parsed], None] | None = None,
) -> int:
    """Parse, dispatch and report the way dmg and daos do (main.go exitWithError and
    cmdutil.OutputJSON): JSON envelope on stdout with -j, 'ERROR: <tool>: ...' on stderr.

    A handler takes (site, parsed) and returns (JSON response, text); ``check`` runs on every
    parsed command line first (dmg's config loading)."""
    release(site)
    head = args[: args.index("--")] if "--" in args else args
    wants_json = any(a in ("-j", "--json") for a in head)
    try:
        p = parse_goflags(root, args)
        if p.help:
            print(f"Usage:\n  {tool} {' '.join(p.path)} [OPTIONS]")
            return 0
        handler = handlers.get(tuple(p.path))
        if handler is None:
            raise Fail(f"stand-in: `{tool} {' '.join(p.path)}' is not modelled")
        if p.rest:
            raise Fail(f"unexpected arguments: {' '.join(p.rest)}")
        if check:
            check(p)
        response, text = handler(site, p)
    except (FlagsError, Fail) as e:
        fail = e if isinstance(e, Fail) else Fail(str(e))
        if wants_json:
            print(
                json.dumps(
                    {"response": None, "error": fail.message, "status": fail.status}, indent=2
                )
            )
        elif fail.stdout:
            print(fail.stdout)
        lines = [f"ERROR: {tool}: {fail.message}"]
        if fail.resolution:
            lines.append(f"ERROR: {tool}: {fail.resolution}")
        raise Refused("\n".join(lines), 1, whole=True) from None
    if wants_json:
        print(json.dumps({"response": response, "error": None, "status": 0}, indent=2))
    elif text:
        print(text)
    return 0


def entity(title: str, rows: list[tuple[str, str]]) -> str:
    """txtfmt.FormatEntity: a title, a rule, then aligned 'key : value' rows."""
    pad = max(len(k) for k, _ in rows)
    return "\n".join([title, "-" * len(title), *(f"  {k:<{pad}} : {v}" for k, v in rows)])


def connect(daos: dict, ident: str | None, who: Identity, rw: bool) -> tuple[dict, str]:
    """daos_pool_connect as `who`: the pool and its effective permissions, or a Fail with
    the DER status the engine answers (srv_acl.c filter_pool_capas_based_on_flags)."""
    pool = find_pool(daos, ident) if ident else None
    if pool is None:
        raise status("DER_NONEXIST")
    perms = effective_perms(pool["acl"], pool["owner"], pool["group"], who)
    readable = bool(set(perms) & set("rt"))
    if not readable or (rw and not set(perms) & set("wcd")):
        raise status("DER_NO_PERM")
    return pool, perms


def find_cont(pool: dict, ident: str | None) -> dict | None:
    return next(
        (c for c in pool["containers"].values() if ident and ident in (c["label"], c["uuid"])), None
    )


def cont_open(cont: dict, who: Identity, rw: bool) -> bool:
    """daos_cont_open as `who` (srv_acl.c: owner always gets get/set-ACL; RW needs a read
    and a write capability, RO some read capability)."""
    perms = effective_perms(cont["acl"], cont["owner"], cont["group"], who)
    if who.principal == cont["owner"]:
        perms += "aA"
    readable = bool(set(perms) & set("rta"))
    return readable and (not rw or bool(set(perms) & set("wTAo")))


def caller() -> Identity:
    """The credential daos_agent would issue this process (it looks the uid up by name)."""
    try:
        return Identity(os.getuid(), os.getgid())
    except KeyError:
        raise Refused(
            f"stand-in: uid {os.getuid()} has no user name on this machine, so "
            "daos_agent could not issue it a credential"
        ) from None


def size_flag(s: str) -> int:
    """sizeFlag.UnmarshalFlag: a go-humanize size."""
    try:
        return parse_bytes(s)
    except ValueError:
        raise ValueError(f"invalid size {json.dumps(s)}") from None


def principal_flag(s: str) -> str:
    """ui.ACLPrincipalFlag: a bare name gets its '@'."""
    p = s if "@" in s else s + "@"
    if not principal_ok(p):
        raise ValueError(f"invalid ACL principal {json.dumps(s)}")
    return p


def opaque(*names: str) -> list[Command]:
    """Real subcommands the stand-in does not model: parsed no further, refused on use."""
    return [Command(n, opaque=True) for n in names]
