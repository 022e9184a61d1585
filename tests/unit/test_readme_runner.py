"""The README runner: finds the shell blocks and their markers, runs them in one shell in
order, stops at the first failing command (naming its README line), always cleans up, and a
broken command in a copy of the real README makes it fail."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests import readme_runner

REPO = Path(__file__).resolve().parents[2]

SAMPLE = """# sample

```python
print("not shell")
```

<!-- readme-test: skip (would install things) -->
```sh
apt-get install everything
```

```sh
echo one > out.txt
export GREETING=hello
```

```bash
false   # a broken command
echo three >> out.txt
```

<!-- readme-test: always (cleanup) -->
```sh
echo "$GREETING, cleaned" > cleanup.txt
```
"""


def test_blocks_and_markers_are_found() -> None:
    blocks = readme_runner.extract(SAMPLE)
    assert [(b.mode, b.first_line) for b in blocks] == [
        ("skip", 9),
        ("run", 13),
        ("run", 18),
        ("always", 24),
    ]
    assert blocks[0].reason == "would install things"
    assert blocks[2].lines == ["false   # a broken command", "echo three >> out.txt"]


@pytest.mark.parametrize(
    "bad",
    [
        "<!-- readme-test: skip -->\n```sh\ntrue\n```\n",  # no reason
        "<!-- readme-test: sometimes (x) -->\n```sh\ntrue\n```\n",
        "```sh\ntrue\n",  # never closed
    ],
)
def test_malformed_markers_and_fences_are_refused(bad: str) -> None:
    with pytest.raises(ValueError):
        readme_runner.extract(bad)


def test_the_first_failing_command_stops_the_run_and_cleanup_still_runs(tmp_path: Path) -> None:
    readme = tmp_path / "README.md"
    readme.write_text(SAMPLE)
    outcome = readme_runner.run(readme, cwd=tmp_path, workdir=tmp_path)
    assert not outcome.ok
    assert outcome.failed_line == 18 and outcome.failed_command.startswith("false")
    assert (tmp_path / "out.txt").read_text() == "one\n"  # "echo three" never ran
    assert (tmp_path / "cleanup.txt").read_text() == "hello, cleaned\n"  # same shell, after all


def test_all_blocks_pass_when_nothing_is_broken(tmp_path: Path) -> None:
    readme = tmp_path / "README.md"
    readme.write_text(SAMPLE.replace("false   # a broken command", "true"))
    outcome = readme_runner.run(readme, cwd=tmp_path, workdir=tmp_path)
    assert outcome.ok, outcome.stderr
    assert (tmp_path / "out.txt").read_text() == "one\nthree\n"
    assert (tmp_path / "cleanup.txt").read_text() == "hello, cleaned\n"  # run once, in place


def test_a_broken_command_in_a_copy_of_the_readme_fails_the_run(tmp_path: Path) -> None:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    first = next(b for b in readme_runner.extract(text) if b.mode == "run")
    command = first.lines[0]
    word = command.split()[0]
    broken = text.replace(command, command.replace(word, word + "-typo", 1), 1)
    copy = tmp_path / "README.md"
    copy.write_text(broken, encoding="utf-8")
    outcome = readme_runner.run(copy, cwd=REPO, workdir=tmp_path, timeout=120)
    assert not outcome.ok
    assert outcome.failed_line == first.first_line
    assert outcome.failed_command.startswith(word + "-typo")
