"""scripts/exports.py, which proposes and writes each module's ``__all__``: it writes the list
where the module's imports end, rewrites an existing one in place (rerunning changes nothing),
and proposes what the repository actually uses."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]

MODULE = '''"""A module."""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    T = Any


def helper() -> str:
    return os.sep
'''


@pytest.fixture(scope="module")
def tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location("pycni_exports_tool", ROOT / "scripts/exports.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while building
    spec.loader.exec_module(module)
    return module


def proposal(tool: ModuleType, path: Path, names: list[str]) -> object:
    return tool.Proposal(tool.load_module(path), names, [], {}, {}, {}, [], [])


def test_written_after_the_imports_then_replaced_in_place(tool: ModuleType, tmp_path: Path) -> None:
    path = tmp_path / "m.py"
    path.write_text(MODULE)
    assert tool.write(proposal(tool, path, ["helper"]))
    first = path.read_text()
    assert first == MODULE.replace("    T = Any\n\n", '    T = Any\n\n__all__ = ["helper"]\n\n'), (
        first
    )
    assert not tool.write(proposal(tool, path, ["helper"]))  # the same again: untouched
    assert path.read_text() == first
    long = [f"name_{i}" for i in range(12)]
    assert tool.write(proposal(tool, path, long))
    again = path.read_text()
    assert again.count("__all__") == 1 and again.index("__all__") == first.index("__all__")
    assert tool.load_module(path).existing_all == long


def test_an_empty_export_list_is_typed(tool: ModuleType, tmp_path: Path) -> None:
    path = tmp_path / "__init__.py"
    path.write_text("")
    assert tool.write(proposal(tool, path, []))
    assert path.read_text() == "__all__: list[str] = []\n"  # mypy --strict needs the type


def test_order_is_ruffs(tool: ModuleType) -> None:
    names = ["b", "T", "MAX_2", "MAX_10", "Cls", "a", "X1"]
    assert sorted(names, key=tool.isort_key) == ["MAX_2", "MAX_10", "X1", "Cls", "T", "a", "b"]


def test_proposals_for_the_repository(tool: ModuleType) -> None:
    index = tool.build_index()
    modules = index.modules

    def exports(name: str) -> list[str]:
        return list(tool.propose(index, modules[name]).exports)

    assert "parse" in exports("pycni.spec.version")  # imported elsewhere
    assert "Version" in exports("pycni.spec.version")  # what parse returns
    assert "register" in exports("pycni.cli.cnitool")  # importlib.import_module(name).register
    assert "main" in exports("pycni.cli.main")  # pyproject's entry point
    assert "PLUGIN_TYPES" in exports("pycni.skel.registry")
    kernel = tool.propose(index, modules["pycni.net.netlink.kernel"])
    assert "LinkChanges" not in kernel.exports and "LinkChanges" in kernel.type_only
    runtime = exports("pycni.runtime")  # lazy: served by __getattr__, kept as declared
    assert "CNIConfig" in runtime and "load_network_conf" in runtime
