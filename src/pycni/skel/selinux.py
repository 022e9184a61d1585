"""SELinux for plugins: is it on, and run a helper under an exec label (tap's selinuxContext).

The reference's tap sets its thread's exec label (``/proc/thread-self/attr/exec``, what
go-selinux's SetExecLabel writes) and then execs ``ip tuntap add``: the process that creates the
tap runs in that domain, so the kernel labels the tun device with it (the tun security hook
takes the creating task's SID). A label cannot be applied to a device made in-process without
``setcon`` rights, so pycni does the same: a helper process exec'd under the label makes the
tap. The label is cleared again right after the helper started, so a long-lived caller (the
warm daemon's worker thread) never execs anything else under it.

``SELinux`` is the seam (``req.host.selinux()``): ``LINUX`` is the machine's;
pycni.skel.fake_host.FakeSELinux records instead, for the plugin-logic tests.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Protocol
else:
    Protocol = object

__all__ = ["EXEC_ATTR", "LINUX", "LabelRefused", "LinuxSELinux", "SELinux", "SELinuxError"]

EXEC_ATTR = "/proc/thread-self/attr/exec"
SELINUXFS_ENFORCE = "/sys/fs/selinux/enforce"
CURRENT_ATTR = "/proc/self/attr/current"


class SELinuxError(Exception):
    """The helper failed (did not start, timed out, or exited non-zero); str() is the text."""


class LabelRefused(SELinuxError):
    """The kernel refused the exec label (no SELinux, or an invalid or forbidden context)."""


class SELinux(Protocol):
    def enabled(self) -> bool:
        """Whether SELinux is on in this machine's kernel (selinuxfs mounted, a label held)."""
        ...

    def run_labelled(self, label: str, argv: Sequence[str], timeout: float) -> None:
        """Exec ``argv`` from this thread (its namespaces) with exec label ``label``; raise
        LabelRefused when the label is refused, SELinuxError when the helper does not exit 0."""
        ...


class LinuxSELinux:
    """The machine's SELinux, read and written through selinuxfs and /proc."""

    __slots__ = ()

    def enabled(self) -> bool:
        if not os.path.exists(SELINUXFS_ENFORCE):
            return False
        try:
            with open(CURRENT_ATTR, "rb") as f:
                current = f.read().rstrip(b"\0\n")
        except OSError:
            return False
        return bool(current) and current != b"kernel"  # as go-selinux decides it

    def run_labelled(self, label: str, argv: Sequence[str], timeout: float) -> None:
        try:
            fd = os.open(EXEC_ATTR, os.O_WRONLY | os.O_CLOEXEC)
        except OSError as exc:
            why = f"failed set socket label: open {EXEC_ATTR}: {_why(exc)}"
            raise LabelRefused(why) from None
        try:
            try:
                os.write(fd, label.encode())
            except OSError as exc:
                why = f"failed set socket label: write {EXEC_ATTR}: {_why(exc)}"
                raise LabelRefused(why) from None
            import subprocess  # only here: a plugin's cold path never loads it

            try:
                proc = subprocess.run(
                    list(argv),
                    stdin=subprocess.DEVNULL,
                    capture_output=True,
                    timeout=timeout,
                    check=False,
                )
            except (OSError, subprocess.TimeoutExpired) as exc:
                raise SELinuxError(f"failed to run {argv[0]}: {exc}") from None
            finally:
                os.write(fd, b"")  # clear it: this thread's next exec is unlabelled again
        finally:
            os.close(fd)
        if proc.returncode != 0:
            output = (proc.stderr or proc.stdout).decode(errors="replace").strip()
            raise SELinuxError(f"failed to run command {output}: exit status {proc.returncode}")


def _why(exc: OSError) -> str:
    return (exc.strerror or str(exc)).lower()


LINUX = LinuxSELinux()

if TYPE_CHECKING:
    _check: type[SELinux] = LinuxSELinux
