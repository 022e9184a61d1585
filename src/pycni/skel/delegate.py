"""IPAM (and other) delegation: run a plugin found in CNI_PATH with the caller's env.

A delegate that is a pycni entry point (it carries the entry-point marker) runs in this
process and thread instead of being exec'd: same semantics, no process start. Any other
delegate is exec'd through the runtime's one exec path (runtime/exec.py: its own process
group, ETXTBSY retry, and the deadline and cancellation of the call in progress, which the
daemon sets with ``call_control``; in-process runs have none, their runtime kills them).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar

from pycni.runtime.find import find_in_path
from pycni.skel.entry_point import is_pycni_entry_point
from pycni.spec import jsoncodec
from pycni.spec.errors import InternalError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pycni.runtime.exec import CallControl
    from pycni.skel.base import Request
    from pycni.spec.result import Result

# runtime.exec (subprocess handling, error decoding) is imported where a delegate is exec'd or
# fails: a bridge run in-process delegating to host-local in-process never needs it.

__all__ = ["call_control", "delegate", "is_pycni_entry_point", "parse_result", "run_in_process"]

CLEANUP_TIMEOUT = 30.0  # seconds an exec'd delegate's DEL may take, whatever the call's state

_control: ContextVar[CallControl | None] = ContextVar("pycni_call_control", default=None)


def current_control() -> CallControl:
    """The deadline and cancellation of the plugin call running on this thread."""
    control = _control.get()
    if control is None:
        from pycni.runtime.exec import NO_CONTROL

        return NO_CONTROL
    return control


@contextlib.contextmanager
def call_control(control: CallControl) -> Iterator[None]:
    """Run a plugin call under ``control``: exec'd delegates are killed at its deadline or
    when it is cancelled (the daemon: caller gone, deadline passed)."""
    token = _control.set(control)
    try:
        yield
    finally:
        _control.reset(token)


def delegate(
    req: Request, plugin_type: str, command: str | None = None, stdin: bytes | None = None
) -> Result | None:
    """Run ``plugin_type`` with ``command`` (default: the caller's) and the caller's stdin.

    Returns the parsed result for ADD, None otherwise; a failure raises the delegate's CNIError.
    """
    command = command or req.command
    data = req.stdin if stdin is None else stdin
    path = find_in_path(plugin_type, req.path)
    env = dict(req.env)
    env["CNI_COMMAND"] = command
    from pycni.skel import registry

    if plugin_type in registry.PLUGIN_TYPES and is_pycni_entry_point(path):
        stdout = run_in_process(req, plugin_type, env, data)
    else:
        from pycni.runtime.exec import CallControl, RawExec

        control = current_control()
        if command == "DEL":  # cleanup, often a rollback of a cancelled ADD: never cancelled
            control = CallControl.start(CLEANUP_TIMEOUT)
        stdout = RawExec(req.stderr).exec_plugin(path, data, env, control)
    return parse_result(req, plugin_type, stdout) if command == "ADD" else None


def run_in_process(req: Request, plugin_type: str, env: dict[str, str], stdin: bytes) -> bytes:
    """Run a registered plugin on this thread, with the caller's host; its stdout, or its
    CNIError raised as an exec'd plugin's would be."""
    from pycni.skel import run as skel

    outcome = skel.run(plugin_type, env, stdin, netns_fd=req.netns_fd, host=req.host)
    if outcome.stderr:
        req.stderr.write(outcome.stderr.decode(errors="replace"))
    if outcome.exit_code != 0:
        from pycni.runtime.exec import plugin_error

        raise plugin_error(f"exit status {outcome.exit_code}", outcome.stdout, outcome.stderr)
    return outcome.stdout


def parse_result(req: Request, plugin_type: str, stdout: bytes) -> Result:
    """The Result a delegate's ADD printed."""
    from pycni.spec.result import Result

    try:
        raw = jsoncodec.loads(stdout)
    except ValueError as exc:
        raise InternalError(f"{plugin_type} printed an unparsable result: {exc}") from None
    if not isinstance(raw, dict):
        raise InternalError(f"{plugin_type} printed a result that is not an object")
    return Result.from_dict(raw, default_version=req.cni_version)
