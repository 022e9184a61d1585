"""`pycni-image`: the image's entry point (install-cni, uninstall, daemon, probe, agent)."""

from __future__ import annotations

import argparse
import os
import sys

from pycni.image import hostns, install_cni
from pycni.image.layout import HOST_MOUNT_NS, IMAGE_RUNTIME, SOCKET, Paths


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pycni-image", description="pycni's node image (docs/kubernetes.md)"
    )
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser(
        "install-cni",
        help="copy the runtime, entry points and conflist into the host's dirs",
        description="Host dirs from CNI_BIN_DIR (/host/opt/cni/bin), CNI_NET_DIR "
        "(/host/etc/cni/net.d) and PYCNI_HOST_OPT (/host/opt/pycni); the conflist from "
        "CNI_CONF_SOURCE (/etc/pycni/cni-conf.json), written as CNI_CONF_NAME "
        "(10-pycni.conflist). An operator's plugin of the same name is kept unless "
        "PYCNI_REPLACE_PLUGINS lists it (comma-separated, or 'all').",
    )
    sub.add_parser("uninstall", help="remove what install-cni wrote; restore replaced plugins")
    sub.add_parser(  # its options (and --help) are `pycni daemon`'s
        "daemon",
        add_help=False,
        help="run `pycni daemon` in the host's mount namespace (from the host's copy)",
        description="Extra arguments go to `pycni daemon`. PYCNI_HOST_MOUNT_NS names the "
        f"host's mount namespace ({HOST_MOUNT_NS}: needs hostPID).",
    )
    sub.add_parser(
        "probe",
        help="the daemon's liveness: `pycni daemon --ping` from the host's mount namespace "
        "(the daemon answers only callers there)",
    )
    sub.add_parser("agent", add_help=False, help="run `pycni agent` (arguments go to it)")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args, rest = parser.parse_known_args(argv)
    if rest and args.command not in ("daemon", "agent"):
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    env = dict(os.environ)
    try:
        if args.command == "install-cni":
            replace = frozenset(
                n.strip() for n in env.get("PYCNI_REPLACE_PLUGINS", "").split(",") if n.strip()
            )
            lines = install_cni.install(Paths(env), replace)
            for line in lines or ["install-cni: everything already in place"]:
                print(line, flush=True)
            return 0
        if args.command == "uninstall":
            for line in install_cni.uninstall(Paths(env)) or ["uninstall: nothing to remove"]:
                print(line, flush=True)
            return 0
        if args.command in ("daemon", "probe"):
            socket = env.get("PYCNI_SOCKET", SOCKET)
            if args.command == "probe":  # where the daemon is, that is the host's
                hostns.exec_on_host(
                    hostns.serving_mount_ns(socket),
                    ["pycni", "daemon", "--ping", "--socket", socket],
                )
            hostns.exec_on_host(
                env.get("PYCNI_HOST_MOUNT_NS", HOST_MOUNT_NS),
                ["pycni", "daemon", "--socket", socket, *rest],
            )
        program = os.path.join(IMAGE_RUNTIME, "venv/bin/pycni")
        try:
            os.execv(program, [program, "agent", *rest])
        except OSError as exc:
            raise OSError(f"cannot run {program}: {exc.strerror}") from None
    except (install_cni.InstallError, hostns.HostError, OSError) as exc:
        sys.stderr.write(f"pycni-image {args.command}: {exc}\n")
        return 1
    return 1  # not reached: exec


if __name__ == "__main__":
    sys.exit(main())
