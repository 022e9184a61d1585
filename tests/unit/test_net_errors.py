"""The error tree of pycni.net: every exception class is in it, drawn as it is, mapped once."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
import types

import pycni.net
from pycni.net import errors
from pycni.net.errors import NetError, NetfilterError, to_cni
from pycni.spec.errors import INTERNAL, INVALID_NETNS, CNIError

# Modules that serve one plugin and raise tree errors, outside pycni.net.
BESIDE_PLUGINS = ("pycni.plugins.meta.firewall.backend", "pycni.plugins.main.tap.tun")


def _modules() -> list[types.ModuleType]:
    names = [m.name for m in pkgutil.walk_packages(pycni.net.__path__, "pycni.net.")]
    return [importlib.import_module(n) for n in (*names, *BESIDE_PLUGINS)]


def _defined_exceptions() -> dict[str, type[BaseException]]:
    found: dict[str, type[BaseException]] = {}
    for module in _modules():
        for name, obj in vars(module).items():
            if (
                inspect.isclass(obj)
                and issubclass(obj, BaseException)
                and obj.__module__ == module.__name__
            ):
                found[name] = obj
    return found


def _drawn() -> dict[str, tuple[str, list[str]]]:
    """name -> (drawn tree parent, drawn builtin bases) from errors.py's docstring."""
    doc = errors.__doc__ or ""
    drawn: dict[str, tuple[str, list[str]]] = {}
    stack: list[tuple[int, str]] = []
    block = doc.split("::\n", 1)[1].strip("\n").split("\n\n")[0]  # the indented drawing
    for line in block.splitlines():
        m = re.match(r"^[\s│├└─]*(\w+)(?:\(([\w, ]+)\))?\s{2,}", line)
        assert m, f"not a tree line: {line!r}"
        depth = line.index(m.group(1))
        while stack and stack[-1][0] >= depth:
            stack.pop()
        parent = stack[-1][1] if stack else ""
        bases = [b.strip() for b in (m.group(2) or "").split(",") if b.strip()]
        drawn[m.group(1)] = (parent, bases)
        stack.append((depth, m.group(1)))
    return drawn


def test_every_exception_pycni_net_defines_is_a_net_error() -> None:
    strays = [n for n, c in _defined_exceptions().items() if not issubclass(c, NetError)]
    assert strays == []


def test_the_docstring_draws_the_tree_as_it_is() -> None:
    defined = _defined_exceptions()
    drawn = _drawn()
    assert set(drawn) == set(defined), "errors.py's drawing and the code disagree"
    for name, (parent, bases) in drawn.items():
        cls = defined[name]
        if name == "NetError":
            continue
        assert parent in {c.__name__ for c in cls.__mro__[1:]}, f"{name} is not under {parent}"
        for base in bases:
            assert base in {c.__name__ for c in cls.__mro__[1:]}, f"{name} lacks base {base}"


def test_callers_keep_the_builtin_bases_they_catch() -> None:
    defined = _defined_exceptions()
    assert issubclass(defined["NetlinkError"], OSError)
    assert issubclass(defined["LinkNotFound"], LookupError)
    assert issubclass(defined["NftError"], NetfilterError)


def test_to_cni_keeps_the_text_and_gives_code_999() -> None:
    from pycni.net.route import RouteError

    err = to_cni(RouteError("route 10.0.0.0/8 via 10.1.1.1 not found"))
    assert (err.code, err.msg) == (INTERNAL, "route 10.0.0.0/8 via 10.1.1.1 not found")


def test_to_cni_keeps_an_error_that_already_has_a_cni_code() -> None:
    from pycni.net.ns import NetNSNotFound

    missing = NetNSNotFound("/run/netns/gone")
    assert to_cni(missing) is missing
    assert isinstance(missing, CNIError) and missing.code == INVALID_NETNS


def test_a_net_error_escaping_a_plugin_becomes_that_cni_error_on_stdout() -> None:
    """skel maps it once: the plugin need not catch and re-wrap."""
    from pycni.net.link import LinkNotFound
    from pycni.skel import run as skel
    from pycni.skel.base import Plugin, Request
    from pycni.spec.result import Result

    class Failing(Plugin):
        def add(self, req: Request) -> Result:
            raise LinkNotFound("eth9")

    env = {
        "CNI_COMMAND": "ADD",
        "CNI_CONTAINERID": "c1",
        "CNI_NETNS": "/var/run/netns/x",
        "CNI_IFNAME": "eth0",
        "CNI_PATH": "/opt/cni/bin",
    }
    out = skel.run_plugin(Failing(), env, b'{"cniVersion":"1.0.0","name":"n","type":"t"}')
    assert out.exit_code == 1
    reply = CNIError.from_dict(__import__("json").loads(out.stdout))
    assert (reply.code, reply.msg) == (INTERNAL, 'Link not found: "eth9"')
    assert b"Traceback" not in out.stdout
