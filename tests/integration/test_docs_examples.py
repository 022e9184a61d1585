"""Every marked output example in the docs is what the command prints today (see
tests/docs_examples.py; regenerate with `.venv/bin/python -m tests.docs_examples --write`),
and the docs name one directory for pycni's plugins."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from tests import docs_examples

pytestmark = [pytest.mark.kernel, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def produced() -> dict[str, str]:
    if not shutil.which("podman") or not shutil.which("containerd"):
        pytest.fail("the doctor examples show podman and containerd: run make setup-test")
    return docs_examples.produce()


def test_the_docs_show_what_the_commands_print(produced: dict[str, str]) -> None:
    problems = docs_examples.mismatches(produced, docs_examples.doc_files())
    assert not problems, "\n\n".join(problems) + (
        "\n\nregenerate: .venv/bin/python -m tests.docs_examples --write"
    )


def test_a_changed_output_is_caught(produced: dict[str, str], tmp_path: Path) -> None:
    """The check itself: a doc whose block says one thing the doctor no longer says fails,
    and a marker without an example fails."""
    cli = (REPO / "docs" / "cli.md").read_text(encoding="utf-8")
    changed = tmp_path / "cli.md"
    changed.write_text(cli.replace("all accounted for", "all counted for", 1), encoding="utf-8")
    (problem,) = docs_examples.mismatches(produced, [changed])
    assert "doctor-healthy differs" in problem and "+ok    leaks" in problem
    stray = tmp_path / "stray.md"
    stray.write_text(cli + "\n<!-- docs-example: no-such -->\n```\nx\n```\n", encoding="utf-8")
    problems = docs_examples.mismatches(produced, [stray])
    assert problems == ["stray.md:" + problems[0].split(":")[1] + ": no example named "
                        "'no-such' in EXAMPLES"]  # fmt: skip
    assert docs_examples.mismatches(produced, []) == [
        f"example {name!r} is shown in no doc" for name in produced
    ]


def test_the_docs_agree_on_the_plugin_directory() -> None:
    """README, podman.md and containerd.md install pycni's plugins into one directory and point
    the runtime there."""
    found: dict[str, set[str]] = {}
    patterns = (
        r"pycni plugins install (/[^\s`]+)",
        r'cni_plugin_dirs = \["([^"]+)"\]',
        r'bin_dir = "([^"]+)"',
    )
    for name in ("README.md", "docs/podman.md", "docs/containerd.md"):
        text = (REPO / name).read_text(encoding="utf-8")
        found[name] = {m for p in patterns for m in re.findall(p, text)}
        assert found[name], f"{name} names no plugin directory"
    allowed = {"/opt/pycni/bin", "/tmp/pycni-tour/bin"}  # the README tour's own
    assert all(dirs <= allowed for dirs in found.values()), found
    assert all("/opt/pycni/bin" in found[n] for n in ("docs/podman.md", "docs/containerd.md"))
