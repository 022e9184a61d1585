"""The public packages say what they export, and nothing imports past it.

pycni's public interface is the package's top level (CNIError, __version__), libcni
(pycni.runtime), the spec's types (pycni.spec), the plugin framework (pycni.skel) and the
record helper (pycni.record): each of their modules lists its interface in a hand-curated
``__all__``. Every other module is internal and has none. Checks,
on the source (ast) plus one import per module:

- every public module defines ``__all__``, and each name in it exists once the module is
  imported (a name defined only under ``if TYPE_CHECKING:`` would not); no other module does;
- every ``from pycni.<public>.x import y`` in src, tests and bench (inside functions and
  TYPE_CHECKING blocks too) names a submodule or a name in x's ``__all__``. Tests and bench may
  import an underscored name: a white-box test of a private helper says so by the underscore.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src"

PUBLIC = ("pycni.runtime", "pycni.spec", "pycni.skel", "pycni.record")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {module_name(p): p for p in sorted((SRC / "pycni").rglob("*.py"))}


def checked(module: str) -> bool:
    """A module of a public package."""
    return module == "pycni" or any(module == p or module.startswith(p + ".") for p in PUBLIC)


def declared_all(path: Path) -> list[str] | None:
    """The literal ``__all__`` a module assigns at top level, or None."""
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
                assert isinstance(node.value, ast.List | ast.Tuple), f"{path}: __all__ not a list"
                names = [e.value for e in node.value.elts if isinstance(e, ast.Constant)]
                assert all(isinstance(n, str) for n in names), f"{path}: __all__ not strings"
                return [str(n) for n in names]
    return None


def is_type_checking(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and ast.unparse(node.test).endswith("TYPE_CHECKING")


def type_only(path: Path) -> set[str]:
    """Names a module binds only in ``if TYPE_CHECKING:`` blocks: they exist for the type
    checker alone, so they are in no ``__all__`` (a star import would fail on them), and other
    modules import them under TYPE_CHECKING too."""
    blocks = [n for n in ast.parse(path.read_text()).body if is_type_checking(n)]
    inside = {
        t.id
        for block in blocks
        for stmt in block.body
        for t in ast.walk(stmt)
        if isinstance(t, ast.Name) and isinstance(t.ctx, ast.Store)
    }
    inside |= {
        stmt.name
        for block in blocks
        for stmt in block.body
        if isinstance(stmt, ast.ClassDef | ast.FunctionDef)
    }
    return inside - set(dir(importlib.import_module(module_name(path))))


def from_imports(path: Path) -> list[tuple[int, str, str, bool]]:
    """(line, module, name, under TYPE_CHECKING) of every ``from ... import`` in the file,
    relative ones resolved."""
    if path.is_relative_to(SRC):
        own = module_name(path)
    elif path.is_relative_to(ROOT):
        own = ".".join(path.relative_to(ROOT).with_suffix("").parts)
    else:
        own = path.stem
    package = own if path.name == "__init__.py" else own.rpartition(".")[0]
    tree = ast.parse(path.read_text(), str(path))
    typing_lines = {
        n.lineno
        for block in ast.walk(tree)
        if isinstance(block, ast.If) and is_type_checking(block)
        for stmt in block.body
        for n in ast.walk(stmt)
        if isinstance(n, ast.ImportFrom)
    }
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.ImportFrom):
            continue
        if node.level:
            base = package.split(".")
            base = base[: len(base) - (node.level - 1)] if node.level > 1 else base
            source = ".".join([*base, node.module] if node.module else base)
        else:
            source = node.module or ""
        out += [(node.lineno, source, a.name, node.lineno in typing_lines) for a in node.names]
    return sorted(out)


def violations(files: list[Path]) -> list[str]:
    """``path:line: name from module`` for each import of a name its module does not export."""
    exports = {m: declared_all(p) for m, p in MODULES.items() if checked(m)}
    typing_names: dict[str, set[str]] = {}
    wrong = []
    for path in files:
        outside_src = not path.is_relative_to(SRC)
        for line, module, name, for_typing in from_imports(path):
            if module not in exports or f"{module}.{name}" in MODULES:
                continue  # not a checked pycni module, or a submodule
            if name in (exports[module] or ()) or (outside_src and name.startswith("_")):
                continue
            if for_typing and module not in typing_names:
                typing_names[module] = type_only(MODULES[module])
            if for_typing and name in typing_names[module]:
                continue
            where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
            wrong.append(f"{where}:{line}: {name} from {module}")
    return wrong


def test_the_scan_sees_the_tree(tmp_path: Path) -> None:
    """The checks below mean something: relative imports, imports in functions and under
    TYPE_CHECKING are seen, and an import past a module's __all__ is reported."""
    assert "pycni.runtime.api" in MODULES and "pycni.spec.decode" in MODULES
    runtime = from_imports(MODULES["pycni.runtime"])
    assert ("pycni.runtime.aio", "AsyncCNIConfig", True) in {i[1:] for i in runtime}
    delegate = from_imports(MODULES["pycni.skel.delegate"])  # NO_CONTROL: inside a function
    assert any(m == "pycni.runtime.exec" and n == "NO_CONTROL" for _, m, n, _ in delegate)
    probe = tmp_path / "probe.py"
    # Built from parts, so that no scan of this file reads the probe's imports as uses.
    source = "from pycni.spec.decode import "
    probe.write_text(
        "from pycni.spec import decode\n"  # a submodule: fine
        f"{source}Int, _META\n"  # exported; private, from a test: fine
        f"def f():\n    {source}{'INT64'}\n"  # defined, not exported
        f"if TYPE_CHECKING:\n    {source}{'T'}\n"  # the type checker's alone, for it: fine
        f"{source}{'T'}\n"  # ... but not at run time
    )
    assert violations([probe]) == [
        f"{probe}:4: INT64 from pycni.spec.decode",
        f"{probe}:7: T from pycni.spec.decode",
    ]


@pytest.mark.parametrize("module", [m for m in MODULES if checked(m)])
def test_module_declares_what_it_exports(module: str) -> None:
    names = declared_all(MODULES[module])
    assert names is not None, f"{module} is public and has no __all__: list its interface"
    assert len(names) == len(set(names)), f"{module}.__all__ repeats a name"
    loaded = importlib.import_module(module)
    missing = [n for n in names if not hasattr(loaded, n)]
    assert not missing, f"{module}.__all__ names what the module does not have: {missing}"


def test_nothing_imports_a_name_a_module_does_not_export() -> None:
    files = [p for top in ("src", "tests", "bench") for p in sorted((ROOT / top).rglob("*.py"))]
    wrong = violations(files)
    assert not wrong, "imported but not in the module's __all__:\n" + "\n".join(wrong)


@pytest.mark.parametrize("module", [m for m in MODULES if not checked(m)])
def test_internal_modules_have_no_all(module: str) -> None:
    assert declared_all(MODULES[module]) is None, (
        f"{module} is internal: it has no __all__ (only pycni.runtime, .spec, .skel and .record "
        "curate one)"
    )
