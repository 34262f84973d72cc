"""What everything the local DAC downloads with is given of the site's network settings: the
standard proxy variables and the CA bundle a TLS-re-signing proxy needs.

Tools read different spellings: apt and wget only the lower-case `http_proxy`/`https_proxy`,
Go both cases, pip both. `env()` hands every download (debootstrap, apt-get in the release
chroots, go get) both spellings of each variable that is set. The CA bundle is SSL_CERT_FILE
when it names a file (Go, pip and OpenSSL honour it), else Debian's; `ca_bundle()` names it so a
chroot gets a copy (apt there reads `Acquire::https::CAInfo`, Go there SSL_CERT_FILE) and
debootstrap's wget one through a wgetrc. Nothing here decides whether to use a proxy: that is
the site's environment, passed on as given.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["PROXY_VARIABLES", "env", "ca_bundle", "wgetrc"]

#: each proxy variable, in the spelling tools most often read (lower case is apt's and wget's)
PROXY_VARIABLES = ("http_proxy", "https_proxy", "no_proxy", "all_proxy", "ftp_proxy")
_SYSTEM_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"


def env(base: dict[str, str] | None = None) -> dict[str, str]:
    """`base` (default: this process's environment) with each proxy variable in both cases
    (a value given in one case fills the other), and SSL_CERT_FILE set to `ca_bundle()`."""
    out = dict(os.environ if base is None else base)
    for lower in PROXY_VARIABLES:
        value = out.get(lower) or out.get(lower.upper())
        if value:
            out.setdefault(lower, value)
            out.setdefault(lower.upper(), value)
    bundle = ca_bundle(out)
    if bundle:
        out["SSL_CERT_FILE"] = bundle
    return out


def ca_bundle(environ: dict[str, str] | None = None) -> str | None:
    """The CA bundle downloads trust: SSL_CERT_FILE if it names a file, else Debian's (None
    when neither exists)."""
    given = (os.environ if environ is None else environ).get("SSL_CERT_FILE", "")
    for path in (given, _SYSTEM_BUNDLE):
        if path and os.path.isfile(path):
            return path
    return None


def wgetrc(directory: Path) -> dict[str, str]:
    """For debootstrap (wget, which reads no SSL_CERT_FILE): a wgetrc in `directory` naming the
    CA bundle, as the WGETRC variable to add; {} without a bundle."""
    bundle = ca_bundle()
    if not bundle:
        return {}
    rc = directory / "wgetrc"
    rc.write_text(f"ca_certificate = {bundle}\n")
    return {"WGETRC": str(rc)}
