"""Running one plugin process: env, stdin, capture, error decoding (libcni's pkg/invoke).

The plugin is started from the calling thread and waited on in that same thread, so a caller
that entered a network namespace with ``setns()`` on this thread runs the plugin inside it.
Each plugin gets its own session (and process group) so a timeout or a cancellation can kill it
together with anything it started. A call without deadline or cancellation in a single-threaded
process (every `pycni add`) starts it with ``os.posix_spawn`` and pumps its pipes with ``poll``;
any other call (a deadline, a cancel event, the multi-threaded daemon) uses
``subprocess.Popen``. The first path exists for start-up time: a one-shot CLI call does not
import subprocess (with selectors, threading, signal and enum), about a fifth of its imports.
"""

from __future__ import annotations

import errno
import io  # loaded by the interpreter's own start-up: free
import os
import sys
import time

from pycni.record import record
from pycni.spec import version as spec_version
from pycni.spec.args import format_pairs
from pycni.spec.errors import DECODING_FAILURE, INTERNAL, UNKNOWN, CNIError
from pycni.spec.gojson import go_unmarshal
from pycni.spec.result import Result

from .find import find_in_path
from .trace import TraceContext
from .trace import apply as apply_trace

TYPE_CHECKING = False
if TYPE_CHECKING:
    # subprocess is imported where a plugin is started: a plugin run in-process that only
    # imports this module for its types and errors (delegation) does not load it.
    import subprocess
    import threading
    from collections.abc import Iterable, Mapping, Sequence
    from typing import IO, Protocol

__all__ = [
    "NO_CONTROL",
    "CallControl",
    "Exec",
    "PluginCancelled",
    "PluginInfo",
    "PluginTimeout",
    "RawExec",
    "decode_result",
    "exec_plugin_with_result",
    "exec_plugin_without_result",
    "get_version_info",
    "go_quote",
    "plugin_env",
    "plugin_error",
]

BUSY_RETRIES = 5
BUSY_DELAY = 1.0
_CANCEL_POLL = 0.05


class PluginTimeout(CNIError):
    """The plugin did not finish before the call's deadline and was killed."""


class PluginCancelled(CNIError):
    """The call was cancelled while the plugin ran; the plugin was killed."""


@record(frozen=True)
class CallControl:
    """Deadline and cancellation for one API call (the Go ``context.Context`` equivalent)."""

    timeout: float | None = None
    cancel: threading.Event | None = None
    deadline: float | None = None
    trace: TraceContext | None = None  # passed to plugins as TRACEPARENT/TRACESTATE/BAGGAGE

    @classmethod
    def start(
        cls,
        timeout: float | None = None,
        cancel: threading.Event | None = None,
        trace: TraceContext | None = None,
    ) -> CallControl:
        deadline = None if timeout is None else time.monotonic() + timeout
        return cls(timeout=timeout, cancel=cancel, deadline=deadline, trace=trace)

    def remaining(self) -> float | None:
        if self.deadline is None:
            return None
        return self.deadline - time.monotonic()


NO_CONTROL = CallControl()


@record(frozen=True)
class PluginInfo:
    """A plugin's VERSION answer."""

    cni_version: str
    supported_versions: tuple[str, ...]


if TYPE_CHECKING:

    class Exec(Protocol):
        """What the runtime needs to run plugins; swap it out to fake or wrap execution."""

        def exec_plugin(
            self, plugin_path: str, stdin: bytes, env: Mapping[str, str], control: CallControl
        ) -> bytes: ...

        def find_in_path(self, plugin: str, paths: Sequence[str]) -> str: ...

else:

    class Exec:
        """What the runtime needs to run plugins (a structural type: ``exec_plugin(path,
        stdin, env, control) -> bytes`` and ``find_in_path(plugin, paths) -> str``); swap it
        out to fake or wrap execution. A plain class at run time: ``typing`` costs a one-shot
        CLI call more than its plugin chain's bookkeeping."""


def go_quote(data: bytes) -> str:
    """Go's ``%q`` of a byte string (``strconv.Quote``), used in libcni's error texts."""
    out = ['"']
    import unicodedata

    text = data.decode("utf-8", errors="surrogateescape")
    short = {"\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t"}
    short |= {"\v": "\\v", '"': '\\"', "\\": "\\\\"}
    for ch in text:
        code = ord(ch)
        if ch in short:
            out.append(short[ch])
        elif 0xDC80 <= code <= 0xDCFF:
            out.append(f"\\x{code - 0xDC00:02x}")
        elif code < 0x20 or code == 0x7F:
            out.append(f"\\x{code:02x}")
        elif code < 0x80 or (ch.isprintable() and unicodedata.category(ch) != "Zs") or ch == " ":
            out.append(ch)
        elif code <= 0xFFFF:
            out.append(f"\\u{code:04x}")
        else:
            out.append(f"\\U{code:08x}")
    out.append('"')
    return "".join(out)


def _exit_text(returncode: int) -> str:
    """Go's ``*exec.ExitError`` text."""
    if returncode >= 0:
        return f"exit status {returncode}"
    import signal

    try:
        name = signal.strsignal(-returncode) or f"signal {-returncode}"
    except ValueError:
        name = f"signal {-returncode}"
    return f"signal: {name[0].lower()}{name[1:]}"


def plugin_error(exec_error: str, stdout: bytes, stderr: bytes) -> CNIError:
    """Turn a failed run into a CNIError exactly as invoke's ``pluginErr`` does."""
    if not stdout:
        if not stderr:
            return CNIError(UNKNOWN, f"netplugin failed with no error message: {exec_error}")
        return CNIError(UNKNOWN, f"netplugin failed: {go_quote(stderr)}: {exec_error}")
    try:
        decoded = go_unmarshal(stdout)
    except ValueError as err:
        return CNIError(
            UNKNOWN,
            f"netplugin failed but error parsing its diagnostic message {go_quote(stdout)}: {err}",
        )
    if decoded is None:
        return CNIError(UNKNOWN, "")
    if not isinstance(decoded, dict):
        return CNIError(
            UNKNOWN,
            f"netplugin failed but error parsing its diagnostic message {go_quote(stdout)}: "
            "json: cannot unmarshal into Go value of type types.Error",
        )
    return CNIError.from_dict(decoded)


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    import contextlib
    import signal

    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError):
        proc.kill()
    proc.wait()
    for stream in (proc.stdin, proc.stdout, proc.stderr):
        if stream is not None:
            with contextlib.suppress(OSError):
                stream.close()


class RawExec:
    """Runs plugins as child processes and copies their stderr to ``stderr`` on success.

    ``stderr=None`` means the current ``sys.stderr``; pass ``copy_stderr=False`` to drop it.
    """

    def __init__(
        self,
        stderr: IO[bytes] | IO[str] | None = None,
        *,
        copy_stderr: bool = True,
        busy_retries: int = BUSY_RETRIES,
        busy_delay: float = BUSY_DELAY,
    ) -> None:
        self.stderr = stderr
        self.copy_stderr = copy_stderr
        self.busy_retries = busy_retries
        self.busy_delay = busy_delay

    def find_in_path(self, plugin: str, paths: Sequence[str]) -> str:
        return find_in_path(plugin, paths)

    def exec_plugin(
        self,
        plugin_path: str,
        stdin: bytes,
        env: Mapping[str, str],
        control: CallControl = NO_CONTROL,
    ) -> bytes:
        if control.deadline is None and control.cancel is None and _single_threaded():
            returncode, stdout, stderr = self._spawn(plugin_path, stdin, env, control)
        else:
            returncode, stdout, stderr = self._popen(plugin_path, stdin, env, control)
        if returncode != 0:
            raise plugin_error(_exit_text(returncode), stdout, stderr)
        if stderr and self.copy_stderr:
            self._copy_stderr(stderr)
        return stdout

    def _spawn(
        self, plugin_path: str, stdin: bytes, env: Mapping[str, str], control: CallControl
    ) -> tuple[int, bytes, bytes]:
        """No deadline, no cancellation: posix_spawn and a poll loop (see the module doc)."""
        attempt = 0
        while True:
            try:
                return _spawn_and_wait(plugin_path, stdin, apply_trace(dict(env), control.trace))
            except OSError as err:
                if err.errno == errno.ETXTBSY and attempt < self.busy_retries:
                    attempt += 1
                    _sleep(self.busy_delay, plugin_path, control)
                    continue
                reason = os.strerror(err.errno) if err.errno else str(err)
                raise plugin_error(f"fork/exec {plugin_path}: {reason.lower()}", b"", b"") from None

    def _popen(
        self, plugin_path: str, stdin: bytes, env: Mapping[str, str], control: CallControl
    ) -> tuple[int, bytes, bytes]:
        import subprocess

        attempt = 0
        while True:
            _check_control(plugin_path, control)
            try:
                # A fresh Popen per attempt: a failed start cannot be re-run (cni#855).
                proc = subprocess.Popen(
                    [plugin_path],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    env=apply_trace(dict(env), control.trace),
                    start_new_session=True,
                    close_fds=True,
                )
            except OSError as err:
                if err.errno == errno.ETXTBSY and attempt < self.busy_retries:
                    attempt += 1
                    _sleep(self.busy_delay, plugin_path, control)
                    continue
                reason = os.strerror(err.errno) if err.errno else str(err)
                raise plugin_error(f"fork/exec {plugin_path}: {reason.lower()}", b"", b"") from None
            break
        stdout, stderr = _communicate(proc, stdin, plugin_path, control)
        return proc.returncode, stdout, stderr

    def _copy_stderr(self, data: bytes) -> None:
        target = self.stderr if self.stderr is not None else sys.stderr
        try:
            buffer = getattr(target, "buffer", None)
            if buffer is not None:
                buffer.write(data)
                buffer.flush()
            elif isinstance(target, io.TextIOBase):
                target.write(data.decode("utf-8", errors="replace"))
            else:
                target.write(data)  # type: ignore[arg-type]
        except (OSError, ValueError, TypeError):
            pass  # stderr is informational only


def _spawn_and_wait(path: str, stdin: bytes, env: dict[str, str]) -> tuple[int, bytes, bytes]:
    """Start ``path`` in a new session with pipes on 0-2 and every other descriptor closed
    (as ``Popen(close_fds=True, start_new_session=True)``; SIGPIPE and SIGXFSZ back to their
    defaults, as ``restore_signals``), feed it ``stdin``, collect stdout and stderr, reap it.
    OSError when it cannot be started (ENOENT, EACCES, ETXTBSY…)."""
    import _signal  # type: ignore[import-not-found]  # signal without enum
    import select

    pipes = [os.pipe(), os.pipe(), os.pipe()]  # non-inheritable: only the dup2'd ends pass
    (in_r, in_w), (out_r, out_w), (err_r, err_w) = pipes
    actions: list[tuple[int, ...]] = [
        (os.POSIX_SPAWN_DUP2, in_r, 0),
        (os.POSIX_SPAWN_DUP2, out_w, 1),
        (os.POSIX_SPAWN_DUP2, err_w, 2),
    ]
    actions += [(os.POSIX_SPAWN_CLOSE, fd) for fd in _inheritable_fds()]
    try:
        pid = os.posix_spawn(
            path,
            [path],
            env,
            file_actions=actions,
            setsid=True,
            setsigdef=(_signal.SIGPIPE, _signal.SIGXFSZ),
        )
    except BaseException:
        for fd in (in_r, in_w, out_r, out_w, err_r, err_w):
            os.close(fd)
        raise
    for fd in (in_r, out_w, err_w):
        os.close(fd)
    chunks: dict[int, list[bytes]] = {out_r: [], err_r: []}
    pending = memoryview(stdin)
    poller = select.poll()
    try:
        if pending:
            os.set_blocking(in_w, False)
            poller.register(in_w, select.POLLOUT)
        else:
            os.close(in_w)
            in_w = -1
        for fd in chunks:
            poller.register(fd, select.POLLIN)
        open_fds = len(chunks) + (in_w >= 0)
        while open_fds:
            for fd, _event in poller.poll():
                if fd == in_w:
                    try:
                        pending = pending[os.write(in_w, pending[:65536]) :]
                    except BlockingIOError:
                        continue
                    except BrokenPipeError:  # it exited without reading it all: as Popen
                        pending = pending[:0]
                    if not pending:
                        poller.unregister(in_w)
                        os.close(in_w)
                        in_w = -1
                        open_fds -= 1
                    continue
                data = os.read(fd, 65536)
                if data:
                    chunks[fd].append(data)
                else:
                    poller.unregister(fd)
                    open_fds -= 1
    except BaseException:  # interrupted: the plugin and what it started go, as with Popen
        try:  # noqa: SIM105 (contextlib is not loaded on this path)
            os.killpg(pid, _signal.SIGKILL)
        except OSError:
            pass
        raise
    finally:
        for fd in (in_w, out_r, err_r):
            if fd >= 0:
                os.close(fd)
        _pid, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), b"".join(chunks[out_r]), b"".join(chunks[err_r])


def _single_threaded() -> bool:
    """posix_spawn's file actions close the inheritable descriptors listed just before: in a
    process with other threads one could close or open one in between, so those (the
    daemon) keep Popen, which closes every descriptor in the child itself."""
    threading = sys.modules.get("threading")
    return threading is None or threading.active_count() == 1


def _inheritable_fds() -> list[int]:
    """Descriptors above 2 a child would inherit (those this process was given open)."""
    try:
        names = os.listdir("/proc/self/fd")
    except OSError:
        return []
    out = []
    for name in names:
        fd = int(name)
        if fd > 2:
            try:
                if os.get_inheritable(fd):
                    out.append(fd)
            except OSError:  # the listing's own descriptor, closed by now
                continue
    return out


def _timeout_error(plugin_path: str, control: CallControl) -> PluginTimeout:
    return PluginTimeout(
        INTERNAL, f"netplugin {plugin_path} timed out after {control.timeout:g}s and was killed"
    )


def _check_control(plugin_path: str, control: CallControl) -> None:
    if control.cancel is not None and control.cancel.is_set():
        raise PluginCancelled(INTERNAL, f"netplugin {plugin_path} was cancelled")
    remaining = control.remaining()
    if remaining is not None and remaining <= 0:
        raise _timeout_error(plugin_path, control)


def _sleep(seconds: float, plugin_path: str, control: CallControl) -> None:
    remaining = control.remaining()
    if remaining is not None:
        seconds = min(seconds, max(remaining, 0))
    if control.cancel is not None:
        control.cancel.wait(seconds)
    else:
        time.sleep(seconds)
    _check_control(plugin_path, control)


def _communicate(
    proc: subprocess.Popen[bytes], stdin: bytes, plugin_path: str, control: CallControl
) -> tuple[bytes, bytes]:
    """Feed stdin and collect output on this thread, honouring the deadline and cancel."""
    import subprocess

    pending: bytes | None = stdin
    try:
        while True:
            wait = control.remaining()
            if control.cancel is not None:
                wait = _CANCEL_POLL if wait is None else min(wait, _CANCEL_POLL)
            try:
                if wait is not None and wait <= 0:
                    raise subprocess.TimeoutExpired([plugin_path], 0)
                data, pending = pending, None  # input can be handed over only once
                return proc.communicate(data, timeout=wait)
            except subprocess.TimeoutExpired:
                if control.cancel is not None and control.cancel.is_set():
                    raise PluginCancelled(
                        INTERNAL, f"netplugin {plugin_path} was cancelled and killed"
                    ) from None
                remaining = control.remaining()
                if remaining is not None and remaining <= 0:
                    raise _timeout_error(plugin_path, control) from None
    except BaseException:
        _kill_group(proc)
        raise


def plugin_env(
    command: str,
    *,
    container_id: str = "",
    netns: str = "",
    args: Iterable[tuple[str, str]] = (),
    args_str: str = "",
    ifname: str = "",
    path: str = "",
    base: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The parent's environment plus the six CNI variables, all set even when empty."""
    env = dict(os.environ if base is None else base)
    env["CNI_COMMAND"] = command
    env["CNI_CONTAINERID"] = container_id
    env["CNI_NETNS"] = netns
    env["CNI_ARGS"] = args_str or format_pairs(args)
    env["CNI_IFNAME"] = ifname
    env["CNI_PATH"] = path
    return env


def config_version(netconf: bytes) -> str:
    """invoke's ``ConfigDecoder``: the config's cniVersion, ``""`` meaning 0.1.0."""
    try:
        obj = go_unmarshal(netconf)
    except ValueError as err:
        raise CNIError(DECODING_FAILURE, f"decoding version from network config: {err}") from None
    found = obj.get("cniVersion") if isinstance(obj, dict) else None
    return found if isinstance(found, str) and found else "0.1.0"


def decode_result(netconf: bytes, stdout: bytes) -> Result:
    """Parse a plugin's result, assuming the config's version when it names none (cni#895)."""
    conf_version = config_version(netconf)
    try:
        raw = go_unmarshal(stdout)
    except ValueError as err:
        raise CNIError(DECODING_FAILURE, f"failed to unmarshal raw result: {err}") from None
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise CNIError(
            DECODING_FAILURE,
            "failed to unmarshal raw result: json: cannot unmarshal "
            f"{type(raw).__name__} into Go value of type map[string]interface {{}}",
        )
    found = raw.get("cniVersion")
    if not (isinstance(found, str) and found):
        raw["cniVersion"] = conf_version
    try:
        return Result.from_dict(raw)
    except CNIError as err:
        go_text = getattr(err, "go_text", None)  # a bad address: Go's net.ParseError text
        if go_text is None:
            raise
        raise CNIError(err.code, go_text) from None


def exec_plugin_with_result(
    exec_: Exec, plugin_path: str, netconf: bytes, env: Mapping[str, str], control: CallControl
) -> Result:
    return decode_result(netconf, exec_.exec_plugin(plugin_path, netconf, env, control))


def exec_plugin_without_result(
    exec_: Exec, plugin_path: str, netconf: bytes, env: Mapping[str, str], control: CallControl
) -> None:
    exec_.exec_plugin(plugin_path, netconf, env, control)


def decode_version_info(data: bytes) -> PluginInfo:
    """invoke's ``PluginDecoder``."""
    try:
        obj = go_unmarshal(data)
    except ValueError as err:
        raise CNIError(DECODING_FAILURE, f"decoding version info: {err}") from None
    if not isinstance(obj, dict):
        obj = {}
    cni_version = obj.get("cniVersion")
    if not isinstance(cni_version, str) or cni_version == "":
        raise CNIError(DECODING_FAILURE, "decoding version info: missing field cniVersion")
    supported = obj.get("supportedVersions")
    if not isinstance(supported, list) or not supported:
        if cni_version == "0.2.0":
            return PluginInfo(cni_version, ("0.1.0", "0.2.0"))
        raise CNIError(DECODING_FAILURE, "decoding version info: missing field supportedVersions")
    return PluginInfo(cni_version, tuple(str(v) for v in supported))


def get_version_info(
    exec_: Exec, plugin_path: str, control: CallControl = NO_CONTROL
) -> PluginInfo:
    """Ask a plugin for its versions; dummy values satisfy plugins built on an old skel."""
    env = plugin_env("VERSION", netns="dummy", ifname="dummy", path="dummy")
    stdin = b'{"cniVersion":"' + spec_version.CURRENT.encode() + b'"}'
    try:
        stdout = exec_.exec_plugin(plugin_path, stdin, env, control)
    except CNIError as err:
        if str(err) == "unknown CNI_COMMAND: VERSION":
            return PluginInfo("0.1.0", ("0.1.0",))
        raise
    return decode_version_info(stdout)
