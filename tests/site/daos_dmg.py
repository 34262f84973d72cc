"""The dmg stand-in (DAOS 2.6 admin tool): pool create / destroy / query / list / get-acl /
update-acl / delete-acl and system query. Rules and sources: daos_tools.py.
"""

from __future__ import annotations

import json
import os
import uuid

from argv_grammar import Arg, Command, Flag, Parsed
from daos_rules import (
    ACLError,
    acl_remove,
    acl_upsert,
    default_pool_acl,
    is_uuid,
    label_ok,
    parse_ace,
    parse_ranks,
    print_ranks,
    resolve_principal,
    si_bytes,
)
from daos_site import (
    Fail,
    caller,
    daos_state,
    entity,
    fault,
    find_pool,
    not_found,
    opaque,
    principal_flag,
    run_go,
    size_flag,
    status,
)
from sitelib import Site, register

MiB, GiB = 1 << 20, 1 << 30


def _pool_id(s: str) -> str:
    """ui.LabelOrUUIDFlag: a UUID, else a valid label."""
    if not is_uuid(s) and not label_ok(s):
        raise ValueError(f"invalid label {json.dumps(s)}")
    return s


def _pool_size(s: str) -> tuple[str, int]:
    """poolSizeFlag: ('ratio', N) for N% of the free space, else ('bytes', n)."""
    t = s.strip()
    if t.endswith("%"):
        ratio = t[:-1].strip()
        if not ratio.isdigit():
            raise ValueError(
                f"invalid pool size ratio {json.dumps(s)}: strconv.ParseUint: "
                f"parsing {json.dumps(ratio)}: invalid syntax"
            )
        if not 0 < int(ratio) <= 100:
            raise ValueError(
                f"Creating DAOS pool with invalid full size ratio {s}: "
                "allowed range 0 < ratio <= 100"
            )
        return "ratio", int(ratio)
    return "bytes", size_flag(s)


def _tier_ratio(s: str) -> list[float]:
    """tierRatioFlag: '6,94' or '6' (the rest to NVMe), adding up to 100."""
    ratios = []
    for part in s.split(","):
        try:
            ratios.append(round(float(part.strip().strip("%")), 2) / 100)
        except ValueError:
            raise ValueError(f"invalid tier ratio {json.dumps(part)}") from None
    if len(ratios) == 1 and ratios[0] < 1:
        ratios.append(1 - ratios[0])
    if any(not 0 <= r <= 1 for r in ratios):
        raise ValueError("Storage tier ratio must be a value between 0-100")
    if abs(sum(ratios) - 1) > 0.01:
        raise ValueError(f"Storage tier ratios must add up to 100 (got {sum(ratios) * 100:f})")
    return ratios


def _uint32(s: str) -> int:
    if not s.isdigit():
        raise ValueError(f"strconv.ParseUint: parsing {json.dumps(s)}: invalid syntax")
    if int(s) >= 1 << 32:
        raise ValueError(f"strconv.ParseUint: parsing {json.dumps(s)}: value out of range")
    return int(s)


POOL_ARG = Arg("<pool label or UUID>", True, _pool_id)
OPAQUE_POOL = (
    "evict",
    "extend",
    "exclude",
    "drain",
    "reintegrate",
    "query-targets",
    "overwrite-acl",
    "set-prop",
    "get-prop",
    "upgrade",
)
OPAQUE_DMG = (
    "server",
    "storage",
    "config",
    "network",
    "support",
    "container",
    "version",
    "server-version",
    "telemetry",
    "check",
)


DMG = Command(
    "dmg",
    flags=[
        Flag("allow-proxy"),
        Flag("insecure", "i"),
        Flag("debug", "d"),
        Flag("log-file", "", "string"),
        Flag("json", "j"),
        Flag("json-logging", "J"),
        Flag("config-path", "o", "string"),
    ],
).sub(
    Command("pool").sub(
        Command(
            "create",
            flags=[
                Flag("group", "g", "ui.ACLPrincipalFlag", principal_flag),
                Flag("user", "u", "ui.ACLPrincipalFlag", principal_flag),
                Flag("properties", "P", "main.PoolSetPropsFlag"),
                Flag("acl-file", "a", "string"),
                Flag("size", "z", "main.poolSizeFlag", _pool_size),
                Flag("tier-ratio", "t", "main.tierRatioFlag", _tier_ratio),
                Flag("nranks", "k", "uint32", _uint32),
                Flag("nsvc", "v", "uint32", _uint32),
                Flag("scm-size", "s", "main.sizeFlag", size_flag),
                Flag("nvme-size", "n", "main.sizeFlag", size_flag),
                Flag("meta-size", "", "main.sizeFlag", size_flag),
                Flag("ranks", "r", "ui.RankSetFlag", parse_ranks),
            ],
            args=[Arg("<pool label>", True)],
        ),
        Command("destroy", flags=[Flag("recursive", "r"), Flag("force", "f")], args=[POOL_ARG]),
        Command(
            "query",
            flags=[Flag("show-enabled", "e"), Flag("show-disabled", "b"), Flag("health-only", "t")],
            args=[POOL_ARG],
        ),
        Command(
            "list",
            aliases=("ls",),
            flags=[Flag("verbose", "v"), Flag("no-query", "n"), Flag("rebuild-only", "r")],
        ),
        Command(
            "get-acl",
            flags=[Flag("outfile", "o", "string"), Flag("force", "f"), Flag("verbose", "v")],
            args=[POOL_ARG],
        ),
        Command(
            "update-acl",
            flags=[Flag("acl-file", "a", "string"), Flag("entry", "e", "string")],
            args=[POOL_ARG],
        ),
        Command(
            "delete-acl", flags=[Flag("principal", "p", "string", required=True)], args=[POOL_ARG]
        ),
        *opaque(*OPAQUE_POOL),
    ),
    Command("system", aliases=("sys",)).sub(
        Command(
            "query",
            flags=[
                Flag("ranks", "r", "ui.RankSetFlag", parse_ranks),
                Flag("rank-hosts", "R", "ui.HostSetFlag"),
                Flag("verbose", "v"),
                Flag("not-ok"),
                Flag("with-states", "", "string"),
            ],
        )
    ),
    *opaque(*OPAQUE_DMG),
)


def _members(site: Site) -> dict[int, str]:
    """rank -> host: the DAOS system is every rank site.json gives, all Joined."""
    return {r: h for h, f in site.facts["hosts"].items() for r in f.get("ranks", [])}


def _engine_facts(site: Site, ranks: list[int]) -> tuple[int, bool]:
    hosts = {h: site.facts["hosts"][h] for h in map(_members(site).get, ranks)}
    targets = max(f.get("targets", 16) for f in hosts.values())
    return targets, all(f.get("nvme_bytes", 1) != 0 for f in hosts.values())


def _free(site: Site, daos: dict, rank: int) -> tuple[int | None, int | None]:
    facts = site.facts["hosts"][_members(site)[rank]]
    used = [p["tier_bytes"] for p in daos["pools"].values() if rank in p["ranks"]]
    scm, nvme = facts.get("scm_bytes"), facts.get("nvme_bytes")
    return (
        None if scm is None else scm - sum(u[0] for u in used),
        None if nvme is None else nvme - sum(u[1] for u in used),
    )


def _tier_bytes(site: Site, daos: dict, o: dict, ranks: list[int]) -> list[int]:
    """Per-rank [SCM, NVMe] bytes, as the client and mgmt_pool.go calculateCreateStorage
    work them out, with their minimum-size faults."""
    targets, has_nvme = _engine_facts(site, ranks)
    prefix = "pool create failed: "
    if o.get("size", ("",))[0] == "ratio":
        free = [
            (s, n)
            for s, n in (_free(site, daos, r) for r in ranks)
            if s is not None and n is not None
        ]
        if len(free) < len(ranks):
            raise Fail("stand-in: an N% size needs hosts.<h>.scm_bytes and nvme_bytes in site.json")
        frac = o["size"][1] / 100
        tiers = [int(min(s for s, _ in free) * frac), int(min(n for _, n in free) * frac)]
        if tiers[0] == 0:
            raise Fail(
                f"failed to generate PoolCreate request: Not enough SCM storage "
                f"available with ratio {o['size'][1]}%: SCM storage capacity or "
                "ratio should be increased"
            )
    elif "size" in o:
        ratio = o.get("tier-ratio", [0.06, 0.94]) if has_nvme else [1.0, 0.0]
        if ratio[0] == 0:
            raise Fail(
                "failed to generate PoolCreate request: can't create pool with 0.0 SCM ratio"
            )
        tiers = [int(o["size"][1] * r) // len(ranks) for r in ratio]
    else:
        tiers = [o["scm-size"], o.get("nvme-size", 0)]
        if tiers[1] and not has_nvme:
            raise Fail(
                f"{prefix}{si_bytes(tiers[1])} NVMe requested for pool but config has zero bdevs"
            )
    n = len(ranks)
    min_total = targets * 16 * MiB * n + (targets * GiB * n if tiers[1] else 0)
    if tiers[0] < targets * 16 * MiB:
        raise fault(
            604,
            "requested SCM capacity is too small (min 16 MiB per target)",
            f"retry the request with a pool size of at least {si_bytes(min_total + MiB)}"
            f", with at least {si_bytes(targets * 16 * MiB * n + MiB)} SCM",
            prefix,
        )
    if tiers[1] and tiers[1] < targets * GiB:
        raise fault(
            605,
            "requested NVMe capacity too small (min 1.0 GiB per target)",
            f"retry the request with a pool size of at least {si_bytes(min_total + MiB)}"
            f", with at least {si_bytes(targets * GiB * n + MiB)} NVMe",
            prefix,
        )
    for r in ranks:
        scm, nvme = _free(site, daos, r)
        if (scm is not None and tiers[0] > scm) or (nvme is not None and tiers[1] > nvme):
            raise status("DER_NOSPACE", prefix)
    return tiers


def _pool_create(site: Site, p: Parsed):
    """Checks in the order dmg's Execute, the control client and the server make them."""
    o = dict(p.opts)
    if o.get("size", ("", 1))[1] == 0:
        del o["size"]  # sizeFlag.IsSet: a zero size is no size at all
    mode = o["size"][0] if "size" in o else "manual"
    if mode != "manual":
        if o.get("scm-size") or o.get("nvme-size"):
            raise Fail("--size may not be mixed with --scm-size or --nvme-size")
        if o.get("meta-size"):
            raise Fail("--meta-size can only be set if --scm-size is set")
    elif not o.get("scm-size"):
        raise Fail("either --size or --scm-size must be set")
    label = p.args["<pool label>"]
    if "," in label:  # the label goes through the --properties parser as "label:<label>"
        raise Fail(f"invalid property {json.dumps(label.split(',', 1)[1])} (must be key:val)")
    label = label.strip()
    if not label_ok(label):
        raise Fail(f"invalid label {json.dumps(label)}")
    for flag in ("properties", "acl-file", "meta-size"):
        if flag in o:
            raise Fail(f"stand-in: dmg pool create --{flag} is not modelled")
    ranks = o.get("ranks", [])
    if mode == "ratio" and o.get("nranks"):
        raise Fail("--size may not be mixed with --nranks")
    if mode == "ratio" and "tier-ratio" in o:
        raise Fail("--size=% may not be mixed with --tier-ratio")
    if mode == "bytes" and o.get("nranks") and ranks:
        raise Fail("--nranks may not be mixed with --ranks")
    if mode == "manual" and o.get("nranks"):
        raise Fail("--nranks may not be mixed with --scm-size")
    if mode == "manual" and "tier-ratio" in o:
        raise Fail("--tier-ratio may not be mixed with --scm-size")
    me = caller()
    user, group = o.get("user", me.principal), o.get("group", me.group)
    for principal, is_group in ((user, False), (group, True)):
        if not resolve_principal(principal, is_group):
            raise Fail(
                f"stand-in (site rule): {'group' if is_group else 'user'} "
                f"{json.dumps(principal)} does not resolve on this machine"
            )
    members = _members(site)
    with site.state() as state:
        daos = daos_state(state)
        prefix = "pool create failed: "
        if any(pool["label"] == label for pool in daos["pools"].values()):
            raise fault(
                609,
                f"pool label {json.dumps(label)} already exists in the system",
                "retry the request with a unique pool label",
                prefix,
            )
        if ranks:
            invalid = [r for r in ranks if r not in members]
            if invalid:
                word = "rank" if len(invalid) == 1 else "ranks"
                raise fault(
                    606,
                    f"pool request contains invalid {word}: {','.join(sorted(map(str, invalid)))}",
                    "retry the request with a valid set of ranks",
                    prefix,
                )
        else:
            ranks = sorted(members)
            if o.get("nranks"):
                if o["nranks"] > len(ranks):
                    raise fault(
                        607,
                        "pool request contains invalid number of ranks "
                        f"(requested: {o['nranks']}, available: {len(ranks)})",
                        "retry the request with a valid number of ranks",
                        prefix,
                    )
                ranks = ranks[: o["nranks"]]
        if not ranks:
            raise Fail(prefix + "pool request contains zero target ranks")
        max_svc = min(len(ranks), 9)
        if o.get("nsvc", 0) > max_svc:
            raise fault(
                608,
                f"pool service replicas number should be an odd number between 1 and {max_svc}",
                "retry the request with a valid number of pool service replicas",
                prefix,
            )
        tiers = _tier_bytes(site, daos, o, ranks)
        pool = {
            "uuid": str(uuid.uuid4()),
            "label": label,
            "owner": user,
            "group": group,
            "acl": default_pool_acl(),
            "ranks": ranks,
            "tier_bytes": tiers,
            "svc_reps": ranks[: o.get("nsvc") or min(len(ranks), 5)],
            "containers": {},
        }
        daos["pools"][label] = pool
    resp = {
        "uuid": pool["uuid"],
        "svc_ldr": pool["svc_reps"][0],
        "svc_reps": pool["svc_reps"],
        "tgt_ranks": ranks,
        "tier_bytes": tiers,
    }
    total = sum(tiers)
    ratio = ",".join(f"{t / total * 100:.2f}%" for t in tiers)
    rows = [
        ("UUID", pool["uuid"]),
        ("Service Leader", str(resp["svc_ldr"])),
        ("Service Ranks", print_ranks(pool["svc_reps"])),
        ("Storage Ranks", print_ranks(ranks)),
        ("Total Size", si_bytes(total * len(ranks))),
    ]
    rows += [
        (f"Storage tier {i} ({name})", f"{si_bytes(t * len(ranks))} ({si_bytes(t)} / rank)")
        for i, (name, t) in enumerate(zip(("SCM", "NVMe"), tiers, strict=False))
    ]
    return resp, _intro(o, len(ranks)) + "\n" + entity(
        f"Pool created with {ratio} storage tier ratio", rows
    )


def _intro(o: dict, nranks: int) -> str:
    """The line dmg prints before it sends the request (pool.go storageAuto*/storageManual)."""

    def pct(scm: float, nvme: float) -> str:  # ratio2Percentage: SCM as a share of NVMe
        return f"{100 * scm / nvme if nvme > 0 else 100:.2f}%"

    if "size" not in o:
        scm, nvme = o["scm-size"], o.get("nvme-size", 0)
        return (
            "Creating DAOS pool with manual per-engine storage allocation: "
            f"{si_bytes(scm)} SCM, {si_bytes(nvme)} NVMe ({pct(scm, nvme)} ratio)"
        )
    if o["size"][0] == "ratio":
        return f"Creating DAOS pool with {o['size'][1]}% of all storage"
    ratio = o.get("tier-ratio", [0.06, 0.94])
    return (
        "Creating DAOS pool with automatic storage allocation: "
        f"{si_bytes(o['size'][1])} total, {pct(*ratio)} ratio"
        + (f" with {nranks} ranks" if o.get("nranks") else "")
    )


def _pool_destroy(site: Site, p: Parsed):
    ident = p.args["<pool label or UUID>"]

    def fail(e: Fail) -> Fail:  # poolDestroyCmd also reports the outcome on stdout
        e.stdout = f"Pool-destroy command failed: {e.message}"
        return e

    with site.state() as state:
        daos = daos_state(state)
        pool = find_pool(daos, ident)
        if pool is None:
            raise fail(Fail("pool destroy failed: " + not_found(ident)))
        if pool["containers"] and not p.opts.get("recursive"):
            raise fail(
                fault(
                    618,
                    "cannot destroy a pool with existing containers",
                    "retry the operation with the recursive flag set to remove "
                    "containers along with the pool",
                    "pool destroy failed: ",
                )
            )
        handles = [
            m
            for mounts in daos["dfuse"].values()
            for m in mounts.values()
            if m.get("pool_uuid") == pool["uuid"]
        ]
        if handles and not p.opts.get("force"):
            raise fail(status("DER_BUSY", "pool destroy failed: "))
        for m in handles:
            m["evicted"] = True  # dfuse keeps running on a dead handle until unmounted
        del daos["pools"][pool["label"]]
    return None, "Pool-destroy command succeeded"


def _pool_info(pool: dict, targets: int) -> dict:
    n = len(pool["ranks"]) * targets
    return {
        "state": "Ready",
        "uuid": pool["uuid"],
        "label": pool["label"],
        "total_targets": n,
        "active_targets": n,
        "total_engines": len(pool["ranks"]),
        "disabled_targets": 0,
        "version": 1,
        "svc_ldr": pool["svc_reps"][0],
        "svc_reps": pool["svc_reps"],
        "rebuild": {"status": 0, "state": "idle"},
        "tier_stats": [
            {"total": t * len(pool["ranks"]), "free": t * len(pool["ranks"]), "media_type": m}
            for t, m in zip(pool["tier_bytes"], ("scm", "nvme"), strict=False)
        ],
    }


def _pool_query(site: Site, p: Parsed):
    if p.opts.get("show-enabled") and p.opts.get("show-disabled"):
        raise Fail("--show-enabled-ranks may not be mixed with --show-disabled-ranks")
    ident = p.args["<pool label or UUID>"]
    with site.state() as state:
        pool = find_pool(daos_state(state), ident)
    if pool is None:
        raise Fail("pool query failed: " + not_found(ident))
    info = _pool_info(pool, _engine_facts(site, pool["ranks"])[0])
    text = [
        f"Pool {pool['uuid']}, ntarget={info['total_targets']}, disabled=0, "
        f"leader={info['svc_ldr']}, version=1, state=Ready",
        "Pool health info:",
        "- Rebuild idle, 0 objs, 0 recs",
        "Pool space info:",
        f"- Target count:{info['total_targets']}",
    ]
    for i, (name, t) in enumerate(zip(("SCM", "NVMe"), info["tier_stats"], strict=False)):
        text += [
            f"- Storage tier {i} ({name}):",
            f"  Total size: {si_bytes(t['total'])}",
            f"  Free: {si_bytes(t['free'])}",
        ]
    return info, "\n".join(text)


def _pool_list(site: Site, p: Parsed):
    with site.state() as state:
        pools = sorted(daos_state(state)["pools"].values(), key=lambda x: x["label"])
    infos = [_pool_info(pool, _engine_facts(site, pool["ranks"])[0]) for pool in pools]
    if not pools:
        return {"pools": []}, "no pools in system"
    text = ["Pool Size State Used Imbalance Disabled", "---- ---- ----- ---- --------- --------"]
    text += [
        f"{i['label']} {si_bytes(sum(t['total'] for t in i['tier_stats']))} Ready 0% 0% "
        f"0/{i['total_targets']}"
        for i in infos
    ]
    return {"pools": infos}, "\n".join(text)


def _acl_response(pool: dict) -> tuple[dict, str]:
    acl = {"entries": pool["acl"], "owner_user": pool["owner"], "owner_group": pool["group"]}
    text = [f"# Owner: {pool['owner']}", f"# Owner Group: {pool['group']}", "# Entries:"]
    text += pool["acl"] or ["#   None"]
    return {"ACL": acl}, "\n".join(text)


def _pool_get_acl(site: Site, p: Parsed):
    ident = p.args["<pool label or UUID>"]
    if "outfile" in p.opts:
        raise Fail("stand-in: dmg pool get-acl --outfile is not modelled")
    with site.state() as state:
        pool = find_pool(daos_state(state), ident)
    if pool is None:
        raise Fail("Pool-get-ACL command failed: " + not_found(ident))
    return _acl_response(pool)


def _pool_modify_acl(site: Site, p: Parsed):
    """update-acl --entry / delete-acl --principal (pool.go, srv_pool.c pool ACL handlers)."""
    ident = p.args["<pool label or UUID>"]
    update = p.path[-1] == "update-acl"
    what = "Pool-update-ACL" if update else "Pool-delete-ACL"
    if update:
        if ("acl-file" in p.opts) == ("entry" in p.opts):
            raise Fail("either ACL file or entry parameter is required")
        if "acl-file" in p.opts:
            raise Fail("stand-in: dmg pool update-acl --acl-file is not modelled")
    with site.state() as state:
        pool = find_pool(daos_state(state), ident)
        if pool is None:
            raise Fail(f"{what} command failed: " + not_found(ident))
        try:
            if update:
                ace = parse_ace(p.opts["entry"])
                if ace["name"] and not resolve_principal(ace["name"], ace["kind"] == "group"):
                    raise Fail(
                        f"stand-in (site rule): {ace['kind']} {json.dumps(ace['name'])}"
                        " does not resolve on this machine"
                    )
                pool["acl"] = acl_upsert(pool["acl"], [p.opts["entry"]])
            else:
                pool["acl"] = acl_remove(pool["acl"], p.opts["principal"])
        except ACLError:
            raise status("DER_INVAL", f"{what} command failed: ") from None
        except KeyError:
            raise status("DER_NONEXIST", f"{what} command failed: ") from None
    resp, text = _acl_response(pool)
    return resp, f"{what} command succeeded, UUID: {pool['uuid']}\n{text}"


def _system_query(site: Site, p: Parsed):
    members = _members(site)
    wanted = p.opts.get("ranks") or sorted(members)
    absent = [r for r in wanted if r not in members]
    ranks = [r for r in wanted if r in members]
    resp = {
        "members": [
            {
                "rank": r,
                "uuid": str(uuid.uuid5(uuid.NAMESPACE_DNS, f"{h}/{r}")),
                "addr": f"{h}:10001",
                "fabric_uri": f"ofi+tcp://{h}:{31416 + r}",
                "state": "joined",
                "info": "",
                "fault_domain": f"/{h}",
            }
            for r, h in sorted(members.items())
            if r in ranks
        ],
        "providers": ["ofi+tcp"],
    }
    text = ["Rank  State", "----  -----", f"{print_ranks(ranks)} Joined"] if ranks else []
    if absent:
        text.append(
            f"Unknown {len(absent)} rank{'s' if len(absent) > 1 else ''}: {print_ranks(absent)}"
        )
    return resp, "\n".join(text)


DMG_HANDLERS = {
    ("pool", "create"): _pool_create,
    ("pool", "destroy"): _pool_destroy,
    ("pool", "query"): _pool_query,
    ("pool", "list"): _pool_list,
    ("pool", "get-acl"): _pool_get_acl,
    ("pool", "update-acl"): _pool_modify_acl,
    ("pool", "delete-acl"): _pool_modify_acl,
    ("system", "query"): _system_query,
}


def _load_config(p: Parsed) -> None:
    """control.LoadConfig: an explicit --config-path must name a non-empty file."""
    path = p.opts.get("config-path")
    if path is not None and not os.path.isfile(path):
        raise Fail(f"failed to load control configuration: open {path}: no such file or directory")
    if path is not None and os.path.getsize(path) == 0:
        raise Fail(f"failed to load control configuration: empty config file: {path}")


@register("dmg")
def dmg(site: Site, args: list[str]) -> int:
    """The DAOS admin tool (runs as root on the site's admin node)."""
    return run_go("dmg", DMG, DMG_HANDLERS, site, args, check=_load_config)
