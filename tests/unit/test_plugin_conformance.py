"""Conformance of every registered plugin type (issue 26, item 6), the parts without a kernel.

The types come from pycni.skel.registry.PLUGIN_TYPES, so a plugin added there is checked
here without editing this file: it has a docs page listed in docs/plugins/README.md, an entry
in a hostile-config suite, and answers VERSION (run through skel in-process, as an entry point
does) with the versions it declares. What differs per type is data (DOC_ELSEWHERE below).
The kernel side (cold-path imports of every type, rollback at each step of the main plugins)
is tests/integration/test_plugin_conformance.py.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from pycni.skel import registry
from pycni.skel import run as skel
from pycni.spec import version
from tests.unit import test_hostile_config

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs" / "plugins"
TYPES = sorted(registry.PLUGIN_TYPES)

# types documented outside docs/plugins/<type>.md (the README table links the page)
DOC_ELSEWHERE = {"flannel": ROOT / "docs" / "cluster.md"}


def _readme_rows() -> dict[str, str]:
    """docs/plugins/README.md's table: plugin type -> the page its row links."""
    rows = {}
    for line in (DOCS / "README.md").read_text().splitlines():
        match = re.match(r"^\|\s*([a-z0-9-]+)\s*\|[^|]*\|\s*\[[^\]]*\]\(([^)]+)\)", line)
        if match:
            rows[match.group(1)] = match.group(2)
    return rows


def _hostile_types() -> set[str]:
    """Types with an entry in a hostile-config suite: the unit suite's table, or a config of
    that type in any tests/**/test_hostile*.py (the kernel suites build whole configs)."""
    found = set(test_hostile_config.PLUGINS)
    for path in (ROOT / "tests").rglob("test_hostile*.py"):
        text = path.read_text()
        found |= set(re.findall(r"""["']type["']\s*:\s*["']([a-z0-9-]+)["']""", text))
    return found


def test_the_registry_is_not_empty() -> None:
    assert {"bridge", "loopback", "host-local", "portmap"} <= set(TYPES)


@pytest.mark.parametrize("plugin_type", TYPES)
def test_has_a_docs_page_listed_in_the_plugins_readme(plugin_type: str) -> None:
    rows = _readme_rows()
    assert plugin_type in rows, f"docs/plugins/README.md has no table row for {plugin_type}"
    page = (DOCS / rows[plugin_type]).resolve()
    expected = DOC_ELSEWHERE.get(plugin_type, DOCS / f"{plugin_type}.md").resolve()
    assert page == expected, f"{plugin_type}'s row links {rows[plugin_type]}, not {expected}"
    text = page.read_text()
    assert plugin_type in text.splitlines()[0] or plugin_type in text, page
    assert len(text.split()) > 50, f"{page} is a stub"


@pytest.mark.parametrize("plugin_type", TYPES)
def test_has_an_entry_in_a_hostile_config_suite(plugin_type: str) -> None:
    assert plugin_type in _hostile_types(), (
        f"{plugin_type}: add it to PLUGINS in tests/unit/test_hostile_config.py (its loader, a "
        "base config and the fields to make hostile) or to a kernel suite's test_hostile*.py"
    )


@pytest.mark.parametrize("plugin_type", TYPES)
def test_answers_version_with_its_supported_list(plugin_type: str) -> None:
    plugin = registry.load(plugin_type)
    declared = list(plugin.supported_versions)
    assert declared and set(declared) <= set(version.ALL)
    assert declared == sorted(declared, key=version.parse), "listed oldest first"
    for asked in ("1.0.0", "0.3.1", ""):
        stdin = json.dumps({"cniVersion": asked} if asked else {}).encode()
        out = skel.run(plugin_type, {"CNI_COMMAND": "VERSION"}, stdin)
        assert out.exit_code == 0, out.stdout
        reply = json.loads(out.stdout)
        assert reply == {"cniVersion": version.CURRENT, "supportedVersions": declared}


@pytest.mark.parametrize("plugin_type", TYPES)
def test_refuses_a_version_it_does_not_support(plugin_type: str) -> None:
    """An ADD of a config in a version the type does not list is error 1, before any work."""
    plugin = registry.load(plugin_type)
    missing = [v for v in version.ALL if v not in plugin.supported_versions]
    asked = missing[0] if missing else "9.9.9"
    env = {
        "CNI_COMMAND": "ADD",
        "CNI_CONTAINERID": "c1",
        "CNI_NETNS": "/nonexistent/netns",
        "CNI_IFNAME": "eth0",
        "CNI_PATH": "/nonexistent",
    }
    stdin = json.dumps({"cniVersion": asked, "name": "n", "type": plugin_type}).encode()
    out = skel.run(plugin_type, env, stdin)
    assert out.exit_code == 1 and json.loads(out.stdout)["code"] == 1, out.stdout
