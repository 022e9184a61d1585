"""What the daemon does with a call (CNI policy), apart from how it got here.

Runs a call on a worker thread in the caller's network namespace, under the call's deadline
and cancellation (exec'd delegates are killed when either fires), and undoes an ADD whose
result never reached its caller by running the same plugin's DEL with the ADD's result as
prevResult, as the caller would have.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import logging
import os
from collections.abc import Callable, Mapping
from typing import Protocol

from pycni import record
from pycni.daemon import protocol
from pycni.daemon.protocol import Reply, Request
from pycni.net import ns as netns
from pycni.net.netfilter import nft
from pycni.plugins.ipam.host_local import store
from pycni.runtime.exec import CallControl
from pycni.skel import registry
from pycni.skel import run as skel
from pycni.skel.delegate import call_control
from pycni.spec.errors import INVALID_NETNS, PLUGIN_NOT_AVAILABLE, CNIError, InternalError

log = logging.getLogger("pycni.daemon")


class Outcome(Protocol):
    stdout: bytes
    stderr: bytes
    exit_code: int


Runner = Callable[..., Outcome]


def default_runner(
    plugin_type: str, env: Mapping[str, str], stdin: bytes, *, netns_fd: int | None
) -> Outcome:
    return skel.run(plugin_type, env, stdin, netns_fd=netns_fd)


def preload_plugins() -> dict[str, str]:
    """Import every available plugin module once; returns {type: "ok" | why it is unusable}."""
    available = set(registry.names())
    state: dict[str, str] = {}
    for name in registry.PLUGIN_TYPES:
        if name not in available:
            state[name] = "not in this installation"
            continue
        try:
            registry.load(name)
            state[name] = "ok"
        except Exception as exc:  # a broken plugin must not keep the others from being served
            state[name] = f"failed to load: {type(exc).__name__}: {exc}"
            log.warning("plugin %s %s", name, state[name])
    warm_call_path()
    return state


def warm_call_path() -> None:
    """Load before serving what a plugin call loads on first use (the cold path imports it
    lazily): the call runner, the netlink client, nftables' netlink and libnftables, whose
    shared library is opened once per process. Without it the first call after a daemon
    (re)start paid more CPU than the next ones (docs/benchmarks.md)."""
    for name in ("pycni.skel.run", "pycni.net.netlink.rtnl.native", "pycni.net.netfilter.nftnl"):
        try:
            importlib.import_module(name)
        except ImportError as exc:  # pragma: no cover - a broken install shows in the call
            log.warning("warm-up: cannot import %s: %s", name, exc)

    nft.available()  # the library loaded and a context made (in the daemon's own namespace)


def warm_state(state_dir: str) -> None:
    """Rebuild, from a journal in the daemon's own directory, the host-local indexes its
    calls had built (on a node with many pods the first call would otherwise read every
    reservation file of its network once: docs/benchmarks.md)."""
    try:
        built = store.warm_indexes(os.path.join(state_dir, "host-local-dirs"))
    except Exception:  # warming is an optimisation: the first call scans, as before
        log.exception("warm-up of host-local indexes failed")
        return
    if built:
        log.info("host-local indexes warmed: %d directories", len(built))


def unavailable(plugins: Mapping[str, str], plugin_type: str) -> Reply | None:
    """The code-50 reply for a type the daemon cannot run, else None."""
    state = plugins.get(plugin_type, "unknown plugin type")
    if state == "ok":
        return None
    err = CNIError(
        PLUGIN_NOT_AVAILABLE,
        f"pycni daemon cannot run plugin {plugin_type!r}: {state}",
        "check `pycni daemon --ping`; reinstall the entry points with `pycni plugins install DIR`",
    )
    return protocol.error_reply(err)


def missing_caller_netns() -> Reply:
    err = CNIError(
        INVALID_NETNS,
        "pycni daemon: the caller's network namespace fd is required",
        "the entry point sends an fd of its /proc/self/ns/net; reinstall the entry points "
        "with `pycni plugins install DIR`",
    )
    return protocol.error_reply(err)


def execute(runner: Runner, req: Request, control: CallControl, home_fd: int) -> Reply:
    """Run one call on this (worker) thread in the caller's netns; always try to return home."""
    assert req.caller_netns_fd is not None
    try:
        netns.setns(req.caller_netns_fd)
    except OSError as exc:
        err = CNIError(INVALID_NETNS, f"cannot enter the caller's network namespace: {exc}")
        return protocol.error_reply(err)
    try:
        with call_control(control):
            out = runner(req.plugin_type, req.env, req.stdin, netns_fd=req.target_netns_fd)
        return Reply(out.exit_code, out.stdout, out.stderr)
    except Exception as exc:  # skel.run does not raise; a bug must still not kill the daemon
        log.exception("plugin %s raised", req.plugin_type)
        return protocol.error_reply(InternalError(f"{type(exc).__name__}: {exc}"))
    finally:
        try:
            netns.setns(home_fd)
        except OSError:
            log.error("setns back to the daemon's namespace failed")


def release_netns(req: Request) -> None:
    """Close the namespace fds the entry point sent (the caller's, the pod's), once."""
    for fd in (req.caller_netns_fd, req.target_netns_fd):
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)
    req.caller_netns_fd = req.target_netns_fd = None


def undo_request(req: Request, add_reply: Reply) -> Request:
    """The DEL that undoes a delivered-nowhere ADD: same config, the ADD's result as prevResult."""
    try:
        config = json.loads(req.stdin)
        config["prevResult"] = json.loads(add_reply.stdout)
        stdin = json.dumps(config).encode()
    except (ValueError, TypeError, AttributeError):
        stdin = req.stdin
    return record.replace(req, env={**req.env, "CNI_COMMAND": "DEL"}, stdin=stdin)


def deadline_error(timeout: float, started: bool, plugin_reply: Reply | None) -> Reply:
    """The reply for a call that ran past its deadline (code 999), or never started (11)."""
    if not started:
        err = CNIError(
            protocol.TRY_AGAIN_LATER,
            f"pycni daemon: the call waited {timeout:g}s for earlier calls and was not run",
            "try again later",
        )
        return protocol.error_reply(err)
    details = ""
    if plugin_reply is not None:
        try:
            details = str(json.loads(plugin_reply.stdout).get("msg", ""))
        except (ValueError, AttributeError):
            details = plugin_reply.stdout.decode(errors="replace")[:500]
        details = f"the plugin ended with: {details}; what it had done was rolled back"
    else:
        details = "the plugin is still running; its ADD is rolled back when it returns"
    err = InternalError(
        f"pycni daemon: the call exceeded its deadline of {timeout:g}s and was cancelled",
        details,
    )
    return protocol.error_reply(err)
