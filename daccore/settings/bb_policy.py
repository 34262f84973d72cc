"""Slurm's burst_buffer.conf rules, applied to persistent buffers users make and destroy with
`dacctl` (issue 30): the rules Slurm applies to `#BB create_persistent` hold on every path.

    AllowUsers=alice,1234     only these users (names or uids) may use burst buffers
    DenyUsers=mallory         these users may not (Slurm refuses both given at once)
    Flags=EnablePersistent    any user may create and destroy persistent buffers; without it
                              (or with DisablePersistent) only privileged users may
    Flags=TeardownFailure     Slurm tears down a job held by a failed setup or stage-in, so it
                              keeps no pool capacity (docs/slurm.md); without it,
                              `site_warnings` says so (`dacctl hosts`)

Privileged, as in Slurm: root, SlurmUser, and here the config's `admin_group` too. The file is
the one `burst_buffer_conf` names (read at every request: an admin's edit holds at once, as
after `scontrol reconfigure`); '' applies no Slurm rules.
"""

from __future__ import annotations

import pwd

from daccore.errors import AdminError, UserError

TYPE_CHECKING = False  # typing's own: the user service imports no more for it; mypy: True
if TYPE_CHECKING:
    from typing import TypedDict

    from daccore.settings.config import DacConfig

    class Rules(TypedDict):
        """What read_rules finds: AllowUsers (None: not given), DenyUsers, the flags."""

        allow: set[str] | None
        deny: set[str]
        enable: bool
        disable: bool
        teardown_failure: bool


__all__ = ["check_persistent", "read_rules", "site_warnings"]


def read_rules(path: str) -> Rules:
    """{"allow": set|None, "deny": set, "enable": bool} from burst_buffer.conf; keys are
    case-insensitive and a later line wins, as in Slurm's parser."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            lines = f.read(1 << 20).splitlines()
    except OSError as e:
        raise AdminError(
            f"burst_buffer_conf {path}: {e.strerror}: an admin must make it "
            "readable by dac's user service, or set burst_buffer_conf to ''"
        ) from None
    rules: Rules = {
        "allow": None,
        "deny": set(),
        "enable": False,
        "disable": False,
        "teardown_failure": False,
    }
    for line in lines:
        key, eq, value = line.split("#", 1)[0].strip().partition("=")
        key, value = key.strip().lower(), value.strip()
        if not eq:
            continue
        # Slurm splits its user lists on commas and colons (its manual says AllowUsers are
        # comma separated, DenyUsers colon delimited)
        words = {w.strip() for w in value.replace(":", ",").split(",") if w.strip()}
        if key == "allowusers":
            rules["allow"] = words
        elif key == "denyusers":
            rules["deny"] = words
        elif key == "flags":
            flags = {w.lower() for w in words}
            rules["enable"] = "enablepersistent" in flags
            rules["disable"] = "disablepersistent" in flags
            rules["teardown_failure"] = "teardownfailure" in flags
    return rules


def site_warnings(path: str) -> list[str]:
    """What an admin should change in burst_buffer.conf `path` ('' : nothing read, none)."""
    if not path:
        return []
    try:
        rules = read_rules(path)
    except AdminError as e:
        return [str(e)]
    if not rules["teardown_failure"]:
        return [
            f"burst_buffer_conf {path}: Flags has no TeardownFailure: a job held by a "
            "failed setup or stage-in keeps its pool capacity in Slurm until it is "
            "cancelled; add it (docs/slurm.md, 'A job held by a failed setup or stage-in')"
        ]
    return []


def _uids(words: set[str]) -> set[int]:
    out = set()
    for w in words:
        if w.isdigit():
            out.add(int(w))
        else:
            try:
                out.add(pwd.getpwnam(w).pw_uid)
            except KeyError:
                pass  # a user this host does not know is no caller here
    return out


def check_persistent(config: DacConfig, uid: int, rights: int, verb: str) -> None:
    """UserError, one line naming the rule, unless user `uid` (dac's `rights` of it: 0 for
    root and admins) may `verb` ("create" or "destroy") a persistent buffer."""
    path = config.burst_buffer_conf
    if not path or rights == 0:
        return
    try:
        if uid == pwd.getpwnam(config.slurm_user).pw_uid:
            return
    except KeyError:
        pass
    rules = read_rules(path)
    who = _name(uid)
    if rules["allow"] is not None and uid not in _uids(rules["allow"]):
        why = f"{who} is not in AllowUsers"
    elif uid in _uids(rules["deny"]):
        why = f"{who} is in DenyUsers"
    elif rules["disable"] or not rules["enable"]:
        why = (
            "only root, SlurmUser and the admin group may (Flags has "
            f"{'DisablePersistent' if rules['disable'] else 'no EnablePersistent'})"
        )
    else:
        return
    raise UserError(
        f"{verb}-persistent: refused by Slurm's burst buffer rules ({path}): "
        f"{why}; an admin decides who may"
    )


def _name(uid: int) -> str:
    try:
        return f"user {pwd.getpwuid(uid).pw_name} ({uid})"
    except KeyError:
        return f"uid {uid}"
