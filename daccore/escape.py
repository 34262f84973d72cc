"""Any text for a person's terminal or a status record: one printable line, whatever bytes a
user put in a file name.

A path is bytes; Python holds the ones that are not UTF-8 as surrogates (`surrogateescape`),
which JSON and pydantic cannot write, and a name may carry an escape sequence that retitles or
rewrites an admin's terminal. `escape` writes, like `ls -b` and bash's `printf %q`:

    \\\\          a backslash
    \\t \\n \\r    tab, newline, carriage return
    \\xNN        an ASCII control (C0 or DEL), or a byte that is not UTF-8
    \\uNNNN      any other character Python does not call printable: C1 controls,
                bidirectional overrides, line and paragraph separators, unpaired surrogates
    \\UNNNNNNNN  the same above U+FFFF

Every other character stays as it is, so accented and non-Latin names remain readable. The
mapping is one-to-one: the bytes come back from the text (tests/unit/daccore/test_escape.py).

`printable` is what records and outputs use: text that is already one printable line passes
unchanged, so a message escaped once (by dacd, naming a path) is not escaped again when it is
read back, validated and printed.

Standard library only and nothing slow: `dacctl --function job_process` runs inside slurmctld.
"""

from __future__ import annotations

__all__ = ["escape", "printable"]

_SHORT = {"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"}


def escape(text: str | bytes, keep: str = "") -> str:
    """`text` as printable characters (see the module docstring); bytes are read as UTF-8 with
    `surrogateescape`. Characters in `keep` (e.g. "\\n" for multi-line detail) stay raw."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", "surrogateescape")
    if text.isprintable() and "\\" not in text:
        return text
    out = []
    for c in text:
        if c in keep:
            out.append(c)
        elif c in _SHORT:
            out.append(_SHORT[c])
        elif c.isprintable():
            out.append(c)
        elif c < "\x80" or "\udc80" <= c <= "\udcff":  # ASCII control, or a byte not UTF-8
            out.append(f"\\x{ord(c) & 0xFF:02x}")
        elif c <= "\uffff":
            out.append(f"\\u{ord(c):04x}")
        else:
            out.append(f"\\U{ord(c):08x}")
    return "".join(out)


def printable(text: str, keep: str = "") -> str:
    """`text` unchanged when it is already printable (apart from `keep`), else `escape(text)`."""
    if text.isprintable() or (keep and all(c.isprintable() or c in keep for c in text)):
        return text
    return escape(text, keep)
