"""Run the shell blocks of a Markdown file in order, in one shell, like a reader pasting them.

Blocks are fenced with ```sh, ```bash or ```shell; other fences (```text, ```python) are not
run. A block may be marked on the line right before its fence:

- ``<!-- readme-test: skip (reason) -->``: not run. Only for what cannot run inside the suite
  (package installs, ``make test`` itself, long benchmarks); the reason is required.
- ``<!-- readme-test: always (reason) -->``: a cleanup block. It runs in its place like any
  other, and also when an earlier block failed (from the shell's EXIT trap, errors ignored,
  in the same shell so ``%1`` and exported variables still mean the same), so a broken
  README leaves nothing behind.

All blocks become one bash script with ``set -Ee -o pipefail``: the first command that fails
stops the run, and an ERR trap reports the README line it came from.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

SHELLS = ("sh", "bash", "shell")
_MARKER = re.compile(r"^<!--\s*readme-test:\s*(skip|always)\s*\((?P<why>[^)]+)\)\s*-->\s*$")
_FAILED = re.compile(r"README-TEST-FAILED script-line=(\d+) status=(\d+) command=(.*)")


@dataclass(frozen=True)
class Block:
    """One fenced shell block: ``first_line`` is the 1-based README line of its first command."""

    first_line: int
    lines: list[str]
    mode: str  # "run", "skip", "always"
    reason: str = ""


def extract(text: str) -> list[Block]:
    """Every shell block in order, with its marker."""
    blocks: list[Block] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        fence = lines[i].strip()
        if fence.startswith("```") and fence[3:].strip() in SHELLS:
            mode, reason = "run", ""
            if i > 0 and (marker := _MARKER.match(lines[i - 1].strip())):
                mode, reason = marker.group(1), marker.group("why").strip()
            end = i + 1
            while end < len(lines) and lines[end].strip() != "```":
                end += 1
            if end == len(lines):
                raise ValueError(f"line {i + 1}: shell block is never closed")
            blocks.append(Block(i + 2, lines[i + 1 : end], mode, reason))
            i = end + 1
            continue
        if "readme-test:" in lines[i] and not _MARKER.match(lines[i].strip()):
            raise ValueError(f"line {i + 1}: malformed readme-test marker: {lines[i]!r}")
        i += 1
    return blocks


@dataclass
class Script:
    text: str
    origin: dict[int, int]  # script line (1-based) → README line


def build(blocks: list[Block]) -> Script:
    """One bash script running every block that is not skipped, in order."""
    out: list[str] = []
    origin: dict[int, int] = {}

    def emit(line: str, readme_line: int | None = None) -> None:
        out.append(line)
        if readme_line is not None:
            origin[len(out)] = readme_line

    emit("set -Ee -o pipefail")
    emit("__readme_cleanup_done=")
    emit("__readme_always() {")
    emit("  trap - ERR; set +e")
    for block in blocks:
        if block.mode == "always":
            for n, line in enumerate(block.lines):
                emit(line, block.first_line + n)
    emit("  :")
    emit("}")
    emit(
        "trap 'echo \"README-TEST-FAILED script-line=$LINENO status=$? "
        "command=$BASH_COMMAND\" >&2' ERR"
    )
    emit("trap '[ -n \"$__readme_cleanup_done\" ] || __readme_always' EXIT")
    for block in blocks:
        if block.mode == "skip":
            continue
        emit(f"echo '+++ README line {block.first_line}' >&2")
        if block.mode == "always":
            emit("__readme_cleanup_done=1")
        for n, line in enumerate(block.lines):
            emit(line, block.first_line + n)
    return Script("\n".join(out) + "\n", origin)


@dataclass
class Outcome:
    returncode: int
    stdout: str
    stderr: str
    failed_line: int | None  # the README line of the command that failed
    failed_command: str = ""

    @property
    def ok(self) -> bool:
        return self.returncode == 0


def run(readme: Path, cwd: Path, workdir: Path, timeout: float = 600) -> Outcome:
    """Run ``readme``'s blocks with ``cwd`` as the working directory."""
    script = build(extract(readme.read_text(encoding="utf-8")))
    path = workdir / "readme-blocks.sh"
    path.write_text(script.text, encoding="utf-8")
    proc = subprocess.run(
        ["bash", str(path)], cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False
    )
    failed_line, command = None, ""
    for line in proc.stderr.splitlines():
        found = _FAILED.search(line)
        if found and failed_line is None:
            failed_line = script.origin.get(int(found.group(1)))
            command = found.group(3)
    return Outcome(proc.returncode, proc.stdout, proc.stderr, failed_line, command)
