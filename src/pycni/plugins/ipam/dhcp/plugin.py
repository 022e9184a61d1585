"""The dhcp IPAM plugin: ADD/CHECK/DEL/STATUS are calls to the DHCP daemon.

The lease has to outlive the plugin process (it is renewed for the pod's whole life), so the
plugin only forwards the request, with the pod namespace as an fd. Our plugin speaks to
pycni's daemon (``dhcp daemon`` on the entry point, or ``pycni dhcp-daemon``), not to the
reference's Go net/rpc daemon.
"""

from __future__ import annotations

import errno
import os

from pycni.plugins.ipam.dhcp import config as dhcp_config
from pycni.plugins.ipam.dhcp import protocol
from pycni.skel.base import Plugin, Request
from pycni.spec.decode import section
from pycni.spec.errors import (
    INTERNAL,
    LIMITED_CONNECTIVITY,
    PLUGIN_NOT_AVAILABLE,
    CNIError,
    InternalError,
)
from pycni.spec.result import Result

# ADD may wait the daemon's whole retry schedule (208 s by default) before it answers.
CALL_TIMEOUT = 300.0


def socket_path(req: Request) -> str:
    conf = dhcp_config.load(section(req.config, "ipam"))
    return conf.daemon_socket_path or protocol.DEFAULT_SOCKET


def _call(req: Request, method: str, with_netns: bool) -> dict[str, object]:
    netns = os.path.abspath(req.netns) if req.netns else ""
    request: dict[str, object] = {
        "method": method,
        "containerID": req.container_id,
        "netns": netns,
        "ifName": req.ifname,
        "args": req.args,
        "config": req.config,
    }
    path = socket_path(req)
    if not with_netns:
        return _send(path, request, None, method)
    with req.open_netns() as pod:
        return _send(path, request, pod.fd, method)


def _send(path: str, request: dict[str, object], fd: int | None, method: str) -> dict[str, object]:
    try:
        reply = protocol.call(path, request, fd, CALL_TIMEOUT)
    except protocol.DaemonUnreachable as exc:
        raise InternalError(f"error dialing DHCP daemon: {exc}") from None
    except (OSError, ValueError) as exc:
        raise InternalError(f"error calling {method}: {exc}") from None
    error = reply.get("error")
    if isinstance(error, dict):
        code = error.get("code")
        raise CNIError(
            code if isinstance(code, int) else INTERNAL,
            f"error calling {method}: {error.get('msg', '')}",
            str(error.get("details") or ""),
        )
    result = reply.get("result")
    return result if isinstance(result, dict) else {}


class Dhcp(Plugin):
    about = "pycni dhcp: IPv4 addresses leased from a DHCP server by pycni's DHCP daemon"

    def command_line(self, args: list[str]) -> int | None:
        """``dhcp daemon [flags]``: the daemon, as the reference's binary and its units run it."""
        if args[:1] != ["daemon"]:
            return None
        from pycni.plugins.ipam.dhcp import service

        return service.command_line(args[1:])

    def add(self, req: Request) -> Result:
        data = _call(req, "allocate", with_netns=True)
        return Result.from_dict(data).as_version("1.1.0")

    def check(self, req: Request) -> None:
        _call(req, "allocate", with_netns=True)

    def delete(self, req: Request) -> None:
        _call(req, "release", with_netns=False)

    def status(self, req: Request) -> None:
        """Code 50 when no daemon runs (no socket: nothing was leased through one); 51 when
        its socket is there but it does not answer: it died or hangs, so the leases of the
        pods it serves are not renewed and lapse."""
        path = socket_path(req)
        try:
            protocol.call(path, {"method": "ping"}, None, 10.0)
        except (OSError, ValueError) as exc:
            if isinstance(exc, OSError) and exc.errno == errno.ENOENT:
                raise CNIError(
                    PLUGIN_NOT_AVAILABLE, f"DHCP daemon not reachable at {path}: not running"
                ) from None
            raise CNIError(
                LIMITED_CONNECTIVITY,
                f"DHCP daemon not reachable at {path}: {exc}; the leases of the pods it "
                "serves are not being renewed",
            ) from None


PLUGIN = Dhcp()
