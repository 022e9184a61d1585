"""The in-process form of a plugin: what an installed entry point runs when no daemon answers."""

from __future__ import annotations

import os
import sys

from pycni.skel import run as skel
from pycni.spec import version
from pycni.spec.errors import CNIError, InternalError, IOFailure

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import NoReturn

__all__ = ["main"]


def read_stdin() -> bytes:
    """stdin, but at most one byte more than skel accepts (skel refuses the rest, code 6)."""
    return sys.stdin.buffer.read(skel.MAX_STDIN + 1)


def main(plugin_type: str | None = None, args: list[str] | None = None) -> NoReturn:
    """Run one call of ``plugin_type`` (default: argv[0]'s name), or the plugin's own command
    line when ``args`` (default: argv[1:] when the type comes from argv[0]) is one."""
    if plugin_type is None:
        plugin_type = os.path.basename(sys.argv[0])
        args = sys.argv[1:] if args is None else args
    if args:
        _command_line(plugin_type, args)
    try:
        stdin = read_stdin()
    except OSError as exc:
        err = IOFailure(f"error reading from stdin: {exc}")
        outcome = skel.Outcome(err.to_json(version.CURRENT).encode(), b"", 1)
    else:
        try:
            outcome = skel.run(plugin_type, os.environ, stdin)
        except Exception as exc:  # skel.run answers every call; a runtime must see an error
            failure = InternalError(f"pycni: the plugin call failed: {type(exc).__name__}: {exc}")
            outcome = skel.Outcome(failure.to_json(version.CURRENT).encode(), b"", 1)
    if outcome.stderr:
        sys.stderr.buffer.write(outcome.stderr)
        sys.stderr.flush()
    sys.stdout.buffer.write(outcome.stdout)
    sys.stdout.flush()
    # The call is over and its output flushed: skip the interpreter's teardown (finalizing every
    # module and object, a last collection), about a tenth of a one-shot call's instructions.
    # Nothing is lost by it: pycni closes its files with ``with``, registers no atexit handler
    # and leaves no thread with work to finish.
    os._exit(outcome.exit_code)


def _command_line(plugin_type: str, args: list[str]) -> None:
    """Exit with the plugin's own command line's code when ``args`` is one (else return)."""
    from pycni.skel import registry

    try:
        plugin = registry.load(plugin_type)
    except CNIError:  # an unknown type: skel reports it for the CNI call
        return
    code = plugin.command_line(args)
    if code is not None:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else None, sys.argv[2:])
