"""Install the per-exec entry points: one executable per pycni plugin type in a CNI_PATH dir.

Forms: "c" (the native forwarder, hard-linked under every name), "python" (the stdlib-only
forwarder script), "inprocess" (a script that never tries the daemon), "auto" (c when the
system compiler works, else python). Every form falls back to running the plugin in-process
when no daemon answers, and every file carries ``ENTRY_MARKER`` and a mode line
(``pycni-entry-config:...``, read back by ``entry_config``). The c and python forms start a
daemon themselves when none answers unless installed with ``autostart=False`` (autostart.py).
"""

from __future__ import annotations

import compileall
import os
import re
import sys
import sysconfig
from collections.abc import Iterable
from importlib import resources
from pathlib import Path

import pycni
from pycni.daemon import autostart as autostart_mod
from pycni.daemon import protocol
from pycni.entrypoints import build
from pycni.fsutil import write_atomic
from pycni.record import field, record
from pycni.skel import registry
from pycni.skel.entry_point import ENTRY_MARKER

FORMS = ("auto", "c", "python", "inprocess")
DEFAULT_SOCKET = protocol.DEFAULT_SOCKET
_SHEBANG_LIMIT = 250
_CONFIG_BLOCK = re.compile(
    r"# --- pycni install config begin ---\n.*?# --- pycni install config end ---\n", re.S
)


@record
class InstallReport:
    directory: Path
    form: str  # the form actually installed: "c", "python" or "inprocess"
    socket_path: str
    autostart: bool = False
    idle_exit: float = 0.0
    paths: list[Path] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def names(self) -> list[str]:
        return [p.name for p in self.paths]


def import_paths() -> list[str]:
    """Where this pycni is imported from (``-S`` skips site, so the script adds it back)."""
    return [str(Path(pycni.__file__).resolve().parent.parent)]


def site_dirs() -> list[str]:
    out: list[str] = []
    for key in ("purelib", "platlib"):
        path = sysconfig.get_paths()[key]
        if path not in out and os.path.isdir(path):
            out.append(path)
    return out


def interpreter() -> str:
    """The venv's interpreter (not resolved: the venv's symlink is what finds its packages)."""
    return sys.executable


def python_script(
    socket_path: str,
    mode: str,
    *,
    autostart: bool = False,
    idle_exit: float = autostart_mod.IDLE_EXIT_DEFAULT,
) -> bytes:
    template = resources.files("pycni.entrypoints").joinpath("forwarder.py").read_text()
    autostart = autostart and mode == "daemon"
    line = config_line("python" if mode == "daemon" else "inprocess", autostart, idle_exit, "")
    config = (
        "# --- pycni install config begin ---\n"
        f"SOCKET_PATH = {socket_path!r}\n"
        f"MODE = {mode!r}\n"
        f"AUTOSTART = {autostart!r}\n"
        f"IDLE_EXIT = {f'{idle_exit:g}'!r}\n"
        f"LOCK_PATH = {autostart_mod.lock_path(socket_path)!r}\n"
        f"LOG_PATH = {autostart_mod.log_path(socket_path)!r}\n"
        f"ENTRY_CONFIG = {line + socket_path!r}\n"
        f"DAEMON_CODE = {daemon_code()!r}\n"
        f"IMPORT_PATHS: list[str] = {import_paths()!r}\n"
        f"SITE_DIRS: list[str] = {site_dirs()!r}\n"
        f"MAGIC = {protocol.MAGIC!r}\n"
        f"VERSION = {protocol.VERSION!r}\n"
        "# --- pycni install config end ---\n"
    )
    body, count = _CONFIG_BLOCK.subn(lambda _m: config, template)
    if count != 1:
        raise RuntimeError("forwarder.py template lost its config block")
    data = (_shebang() + body).encode()
    assert ENTRY_MARKER in data
    return data


def search_paths() -> tuple[list[str], bool]:
    """The ``sys.path`` entries this pycni needs, resolved now so a call skips ``site``.

    pycni's own directory, the venv's site-packages and the directories their ``.pth`` files
    name. Returns (paths, needs_site): a ``.pth`` that runs code (an ``import`` line, other than
    setuptools' distutils shim, which only matters to code importing distutils) cannot be
    resolved ahead, so then the entry point still runs ``site.addsitedir``.
    """
    paths = list(import_paths())
    needs_site = False
    for directory in site_dirs():
        if directory not in paths:
            paths.append(directory)
        try:
            names = sorted(n for n in os.listdir(directory) if n.endswith(".pth"))
        except OSError:
            continue
        for name in names:
            try:
                lines = Path(directory, name).read_text().splitlines()
            except (OSError, UnicodeDecodeError):
                needs_site = True
                continue
            for line in lines:
                line = line.rstrip()
                if not line or line.startswith("#"):
                    continue
                if line.startswith(("import ", "import\t")):
                    needs_site = needs_site or "_distutils_hack" not in line
                    continue
                entry = os.path.abspath(os.path.join(directory, line))
                if os.path.exists(entry) and entry not in paths:
                    paths.append(entry)
    return paths, needs_site


# An in-process call is one short process that exits when the call is done: the cyclic
# garbage collector would only run during its imports (docs/benchmarks.md) and free nothing
# that matters before exit.
ONE_SHOT = "import gc\ngc.disable()\n"


def path_setup_code() -> str:
    """Python lines that make pycni and its dependencies importable under ``-IS``."""
    paths, needs_site = search_paths()
    if needs_site:
        return (
            "import site\n"
            f"sys.path[:0] = {import_paths()!r}\n"
            f"for d in {site_dirs()!r}: site.addsitedir(d)\n"
        )
    # After the standard library, as site would put them: the stdlib imports (most of them)
    # then find their module in the first directory searched.
    return f"sys.path += {paths!r}\n"


def fallback_code() -> str:
    """What the C forwarder runs with ``python -IS -c CODE TYPE`` when no daemon answers
    (and with ``TYPE daemon ARGS`` for a plugin's own command line, e.g. ``dhcp daemon``)."""
    return (
        "import sys\n" + ONE_SHOT + path_setup_code() + "from pycni.skel.main import main\n"
        "main(sys.argv[1], sys.argv[2:])\n"
    )


def inprocess_script(socket_path: str) -> bytes:
    """The in-process form: a few lines (a script is compiled on every run, never cached)."""
    line = config_line("inprocess", False, 0.0, socket_path)
    body = (
        f'"""pycni entry point (in-process form): runs the plugin in this process.\n\n'
        f'{ENTRY_MARKER.decode()}\n"""\n'
        f"ENTRY_CONFIG = {line!r}\n"
        "MODE = 'inprocess'\n"
        "import sys\n" + ONE_SHOT + path_setup_code() + "from pycni.skel.main import main\n"
        "main()\n"
    )
    return (_shebang() + body).encode()


def _shebang() -> str:
    shebang = f"#!{interpreter()} -IS\n"
    if len(shebang) > _SHEBANG_LIMIT or " " in interpreter():
        raise RuntimeError(f"interpreter path unusable in a shebang: {interpreter()!r}")
    return shebang


def daemon_code() -> str:
    """What an entry point runs (``python -IS -c CODE OPTIONS``) to autostart `pycni daemon`."""
    return (
        "import sys, site\n"
        f"sys.path[:0] = {import_paths()!r}\n"
        f"for d in {site_dirs()!r}: site.addsitedir(d)\n"
        "from pycni.cli.daemon_cmd import main\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )


_CONFIG_LINE = re.compile(rb"pycni-entry-config:([\x20-\x7e]{1,4200})")


def config_line(form: str, autostart: bool, idle_exit: float, socket_path: str) -> str:
    """The mode line every entry point carries (the socket last: it may hold any character)."""
    start = f"autostart=yes;idle-exit={idle_exit:g}" if autostart else "autostart=no"
    return f"pycni-entry-config:form={form};{start};socket={socket_path}"


def entry_config(path: str | Path, limit: int = 4 << 20) -> dict[str, str] | None:
    """How the entry point at ``path`` was installed: form, autostart, idle-exit, socket.

    None when the file is not a pycni entry point (no marker). Only reads the file.
    """
    try:
        with open(path, "rb") as f:
            data = f.read(limit)
    except OSError:
        return None
    if ENTRY_MARKER not in data:
        return None
    match = _CONFIG_LINE.search(data)
    if match is None:  # installed by a pycni from before the mode line
        return {"form": "unknown"}
    text = match.group(1).decode()
    if text.endswith("'"):  # the Python form holds it as a string literal
        text = text[:-1]
    settings, _, socket_path = text.partition(";socket=")
    out = dict(item.partition("=")[::2] for item in settings.split(";"))
    out["socket"] = socket_path
    return out


def precompile() -> str | None:
    """Write the missing ``.pyc`` files of pycni's modules; the problem, or None when done.

    An in-process call imports some forty of them: without their ``.pyc`` (pycni unpacked
    somewhere the plugins' user cannot write, or never imported yet) every call compiles
    them all again, several times the cost of the call itself.
    """
    root = Path(pycni.__file__).resolve().parent
    try:
        done = compileall.compile_dir(str(root), quiet=2)
    except OSError as exc:
        done, reason = False, str(exc)
    else:
        reason = "some modules could not be compiled or their .pyc written"
    if done:
        return None
    return (
        f"pycni's modules in {root} are not all precompiled ({reason}): "
        "every in-process call compiles them"
    )


def _write_atomic(directory: Path, name: str, data: bytes) -> Path:
    write_atomic(
        directory / name, data, mode=0o755, fsync=False, make_dirs=False, prefix=f".{name}."
    )
    return directory / name


def _link_all(directory: Path, source: Path, names: Iterable[str]) -> list[Path]:
    """Hard-link ``source`` under every name (atomically replacing what was there)."""
    out = []
    for name in names:
        tmp = directory / f".{name}.pycni-link"
        if tmp.exists():
            tmp.unlink()
        os.link(source, tmp)
        os.replace(tmp, directory / name)
        out.append(directory / name)
    return out


def install(
    directory: str | Path,
    *,
    socket_path: str = DEFAULT_SOCKET,
    form: str = "auto",
    names: Iterable[str] | None = None,
    autostart: bool = False,
    idle_exit: float = autostart_mod.IDLE_EXIT_DEFAULT,
) -> InstallReport:
    """Write one entry point per plugin type (``names`` defaults to every registered one).

    ``autostart``: a c/python entry point that finds no daemon starts one (which exits after
    ``idle_exit`` seconds without a call; 0: never). `pycni plugins install` turns it on.
    """
    if form not in FORMS:
        raise ValueError(f"unknown entry-point form {form!r}; choose one of {', '.join(FORMS)}")
    if idle_exit < 0:
        raise ValueError("idle_exit must be 0 (never) or positive")
    socket_path = os.path.abspath(socket_path)
    target = Path(directory)
    target.mkdir(parents=True, exist_ok=True)
    wanted = list(registry.names() if names is None else names)
    autostart = autostart and form != "inprocess"
    report = InstallReport(target, form, socket_path, autostart, idle_exit if autostart else 0.0)
    problem = precompile()
    if problem:
        report.notes.append(problem)
    binary: bytes | None = None
    if form in ("auto", "c"):
        try:
            settings = build.ForwarderSettings(
                socket_path,
                interpreter(),
                fallback_code(),
                daemon_code() if autostart else None,
                idle_exit,
                config_line("c", autostart, idle_exit, socket_path),
            )
            binary = build.build(settings)
        except build.BuildError as exc:
            if form == "c":
                raise
            report.notes.append(f"C forwarder not built, using the Python form: {exc}")
    if binary is not None:
        report.form = "c"
        if wanted:
            first = _write_atomic(target, wanted[0], binary)
            report.paths = [first, *_link_all(target, first, wanted[1:])]
        return report
    report.form = "inprocess" if form == "inprocess" else "python"
    if form == "inprocess":
        script = inprocess_script(socket_path)
    else:
        script = python_script(socket_path, "daemon", autostart=autostart, idle_exit=idle_exit)
    report.paths = [_write_atomic(target, name, script) for name in wanted]
    return report
