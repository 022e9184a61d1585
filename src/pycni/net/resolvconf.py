"""resolv.conf parsing into a CNI DNS object (what host-local's ``resolvConf`` returns)."""

from __future__ import annotations

from pycni.spec.result import DNS


def parse_text(text: str) -> DNS:
    """``nameserver``/``domain``/``search``/``options`` lines; ``#`` and ``;`` start comments.

    Like the reference: a line needs a keyword and at least one value, ``nameserver``
    takes its first value only, the last ``domain`` wins, ``search`` and ``options``
    accumulate over lines, and unknown keywords are ignored.
    """
    dns = DNS()
    for raw in text.split("\n"):
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        fields = line.split()
        if len(fields) < 2:
            continue
        keyword, values = fields[0], fields[1:]
        if keyword == "nameserver":
            dns.nameservers.append(values[0])
        elif keyword == "domain":
            dns.domain = values[0]
        elif keyword == "search":
            dns.search.extend(values)
        elif keyword == "options":
            dns.options.extend(values)
    return dns


def parse_file(path: str) -> DNS:
    """Read and parse ``path``; OSError propagates (the caller words the error)."""
    with open(path, encoding="utf-8", errors="replace") as handle:
        return parse_text(handle.read())
