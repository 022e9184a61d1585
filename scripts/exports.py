"""What each pycni module exports: propose (and with --write, set) its ``__all__``.

A name belongs in a module's ``__all__`` when code outside the module uses it:

- ``from M import x`` (relative imports too) in src, tests, bench, scripts and the ``python``
  code blocks of the docs;
- ``M.x`` after ``import M``, ``import pkg.M as m`` or ``from pkg import M`` (also inside
  functions), and ``getattr``/``setattr``/``monkeypatch.setattr``/``mock.patch.object`` on a
  module with a literal name;
- a string naming it: ``"pycni.a.b.x"`` (mock/monkeypatch targets, docs text), ``"pycni.a.b:x"``
  (entry points: pyproject's scripts, the plugin registry);
- ``importlib.import_module(name).x`` where ``name`` comes from strings naming modules in the same
  file (the cli's command modules and their ``register``).

A module that is part of the documented library (``pycni``, ``pycni.runtime``, ``pycni.spec``,
``pycni.record``, ``pycni.skel``: docs/api.md, docs/architecture.md) also exports every name it
defines that those pages mention in backticks, and any module exports the classes and type
aliases its exported functions and classes show in their signatures. Names a module serves
through a module-level ``__getattr__`` (lazy re-exports) cannot be seen statically, nor can a
package's deliberate re-exports of pycni names: the ones already in its ``__all__`` are kept.
Never exported: underscored names, modules bound by ``import x``, TypeVars, and names bound only
under ``if TYPE_CHECKING:`` (they do not exist at run time; importers take them under
TYPE_CHECKING too).

The report lists, per module, the proposed ``__all__``, the names nothing else uses that have no
leading underscore (candidates for one; "dead" when the module itself does not use them
either), the underscored names that other modules use anyway, the names it re-exports from
elsewhere, and the names used from outside that it does not define.

    .venv/bin/python scripts/exports.py [--write | --check] [--quiet] [PATH_OR_MODULE ...]

With no argument every module under src/pycni. ``--write`` inserts ``__all__`` after the module's
docstring and import block, or replaces the existing one where it is (rerunning is idempotent),
then runs ``ruff format`` on the files it changed. ``--check`` exits 1 when a module's
``__all__`` differs from the proposal.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import re
import subprocess
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src"
# Where uses are looked for (besides src/pycni itself).
USER_DIRS = ("tests", "bench", "scripts", "contrib")
DOC_GLOBS = ("README.md", "docs/**/*.md")
# The documented library surface: a name these modules define and the API pages mention is
# exported even when nothing in the repository imports it.
SURFACE_PREFIXES = ("pycni.runtime", "pycni.spec", "pycni.record", "pycni.skel")
SURFACE_MODULES = ("pycni",)
SURFACE_DOCS = ("docs/api.md", "docs/architecture.md")

_DOTTED = re.compile(r"\bpycni(?:\.[A-Za-z_]\w*)+(?::[A-Za-z_]\w*)?")
_BACKTICK = re.compile(r"`([^`\n]+)`")
_FENCE = re.compile(r"^```(?:python|py|pycon)\s*\n(.*?)^```", re.M | re.S)
_DOC_IMPORT = re.compile(
    r"^[ \t]*from[ \t]+(pycni[\w.]*)[ \t]+import[ \t]+(\([^)]*\)|[\w ,]+)", re.M
)
# Calls whose first argument is an object and second a literal attribute name.
_ATTR_CALLS = {"getattr", "setattr", "hasattr", "delattr", "object"}


@dataclass
class Module:
    name: str
    path: Path
    tree: ast.Module
    defined: dict[str, str] = field(default_factory=dict)  # name -> kind
    imported: dict[str, str] = field(default_factory=dict)  # name -> "module[.attr]" it came from
    existing_all: list[str] | None = None
    all_node: ast.stmt | None = None
    lazy: bool = False  # has a module-level __getattr__
    plain_imports: set[str] = field(default_factory=set)  # bound by ``import x``: a module
    typing_names: set[str] = field(default_factory=set)  # TYPE_CHECKING, TypeVars
    # top-level def/class -> the names its public signature shows (annotations, bases)
    signatures: dict[str, set[str]] = field(default_factory=dict)
    loads: set[str] = field(default_factory=set)  # names the module itself reads
    type_only: set[str] = field(default_factory=set)  # bound only under TYPE_CHECKING


@dataclass
class Index:
    modules: dict[str, Module]
    # (module, name) -> the files that use it
    uses: dict[tuple[str, str], set[str]] = field(default_factory=lambda: defaultdict(set))
    documented: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))

    def use(self, module: str, name: str, where: str) -> None:
        if module in self.modules and f"{module}.{name}" not in self.modules:
            self.uses[(module, name)].add(where)

    def resolve_dotted(self, dotted: str, where: str) -> None:
        """``pycni.a.b.x`` or ``pycni.a.b:x`` in a string: a use of x in the longest module
        prefix, when that module has an x (else it is a logger, file or daemon name)."""
        module, _, name = dotted.partition(":")
        if not name:
            parts = dotted.split(".")
            for cut in range(len(parts) - 1, 0, -1):
                if ".".join(parts[:cut]) in self.modules:
                    module, name = ".".join(parts[:cut]), parts[cut]
                    break
        mod = self.modules.get(module)
        if mod is not None and (name in mod.defined or name in (mod.existing_all or ())):
            self.use(module, name, where)


def module_name(path: Path) -> str:
    if not path.is_relative_to(SRC):
        return path.stem  # a file outside the tree (tests of this tool)
    rel = path.relative_to(SRC).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def top_level(body: list[ast.stmt], run_time: bool = False) -> list[ast.stmt]:
    """The statements run at import, through if/try/with blocks (not into defs or classes);
    with ``run_time``, not into ``if TYPE_CHECKING:`` bodies (only the type checker reads them)."""
    out: list[ast.stmt] = []
    for node in body:
        out.append(node)
        if isinstance(node, ast.If):
            if not (run_time and is_type_checking(node)):
                out += top_level(node.body, run_time)
            out += top_level(node.orelse, run_time)
        elif isinstance(node, ast.Try):
            for block in (node.body, node.orelse, node.finalbody):
                out += top_level(block, run_time)
            for handler in node.handlers:
                out += top_level(handler.body, run_time)
        elif isinstance(node, ast.With):
            out += top_level(node.body, run_time)
    return out


def is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def bound_names(node: ast.stmt) -> list[str]:
    """The names a top-level statement binds."""
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return [node.name]
    if isinstance(node, ast.Assign):
        return [n for t in node.targets for n in _targets(t)]
    if isinstance(node, ast.AnnAssign | ast.AugAssign | ast.For):
        return _targets(node.target)
    if isinstance(node, ast.Import):
        return [a.asname or a.name.split(".")[0] for a in node.names]
    if isinstance(node, ast.ImportFrom):
        return [a.asname or a.name for a in node.names]
    return []


def _targets(target: ast.expr) -> list[str]:
    if isinstance(target, ast.Name):
        return [target.id]
    if isinstance(target, ast.Tuple | ast.List):
        return [n for elt in target.elts for n in _targets(elt)]
    if isinstance(target, ast.Starred):
        return _targets(target.value)
    return []


def resolve_from(node: ast.ImportFrom, package: str) -> str:
    """The absolute module of ``from ... import``, for a file whose package is ``package``."""
    if not node.level:
        return node.module or ""
    base = package.split(".")
    if node.level > 1:
        base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def load_module(path: Path) -> Module:
    tree = ast.parse(path.read_text(), str(path))
    mod = Module(module_name(path), path, tree)
    package = mod.name if path.name == "__init__.py" else mod.name.rpartition(".")[0]
    mod.loads = {
        n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Store)
    }
    mod.loads |= {
        n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
    }
    at_run_time = {n for node in top_level(tree.body, run_time=True) for n in bound_names(node)}
    mod.type_only = {n for node in top_level(tree.body) for n in bound_names(node)} - at_run_time
    for node in top_level(tree.body):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            mod.defined.setdefault(node.name, "function")
            mod.signatures.setdefault(node.name, set()).update(signature_names(node))
            if node.name == "__getattr__":
                mod.lazy = True
        elif isinstance(node, ast.ClassDef):
            mod.defined[node.name] = "class"
            mod.signatures.setdefault(node.name, set()).update(signature_names(node))
        elif isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            value = node.value
            if name_of_call(value) in _TYPING_FACTORIES or (
                isinstance(node, ast.Assign | ast.AnnAssign)
                and any(n == "TYPE_CHECKING" for t in targets for n in _targets(t))
            ):
                mod.typing_names.update(n for t in targets for n in _targets(t))
            for target in targets:
                for name in _targets(target):
                    if name == "__all__" and isinstance(node, ast.Assign | ast.AnnAssign):
                        mod.all_node = node
                        value = node.value
                        if isinstance(value, ast.List | ast.Tuple):
                            mod.existing_all = [
                                e.value
                                for e in value.elts
                                if isinstance(e, ast.Constant) and isinstance(e.value, str)
                            ]
                        continue
                    mod.defined.setdefault(name, "variable")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                local = alias.asname or alias.name.split(".")[0]
                mod.defined.setdefault(local, "import")
                mod.imported[local] = alias.name if alias.asname else local
                mod.plain_imports.add(local)
        elif isinstance(node, ast.ImportFrom):
            source = resolve_from(node, package)
            for alias in node.names:
                local = alias.asname or alias.name
                mod.defined.setdefault(local, "import")
                mod.imported[local] = f"{source}.{alias.name}"
        elif isinstance(node, ast.For):
            for name in _targets(node.target):
                mod.defined.setdefault(name, "variable")
    return mod


_TYPING_FACTORIES = {"TypeVar", "ParamSpec", "TypeVarTuple", "NewType"}


def name_of_call(node: ast.expr | None) -> str | None:
    if isinstance(node, ast.Call):
        return _call_name(node)
    return None


def _annotation_names(node: ast.expr | None) -> set[str]:
    """The names an annotation mentions (string annotations parsed too)."""
    out: set[str] = set()
    if node is None:
        return out
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name):
            out.add(sub.id)
        elif isinstance(sub, ast.Constant) and isinstance(sub.value, str):
            with contextlib.suppress(SyntaxError):
                out |= _annotation_names(ast.parse(sub.value, mode="eval").body)
    return out


def signature_names(node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> set[str]:
    """What a caller of a public def or class sees: its parameters' and return annotations, a
    class's bases, its annotated fields and its public methods' signatures."""
    if isinstance(node, ast.ClassDef):
        out: set[str] = set()
        for base in node.bases:
            out |= _annotation_names(base)
        for item in node.body:
            if isinstance(item, ast.AnnAssign) and not _targets(item.target)[0].startswith("_"):
                out |= _annotation_names(item.annotation)
            elif isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef) and (
                not item.name.startswith("_") or item.name in ("__init__", "__call__")
            ):
                out |= signature_names(item)
        return out
    args = node.args
    out = _annotation_names(node.returns)
    for a in [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]:
        if a is not None:
            out |= _annotation_names(a.annotation)
    return out


class UseFinder(ast.NodeVisitor):
    """The uses one file makes of pycni modules' names."""

    def __init__(self, index: Index, where: str, own: str, package: str) -> None:
        self.index = index
        self.where = where
        self.own = own  # this file's module name (uses of its own names do not count)
        self.package = package
        # One dict per scope (module, then each enclosing function): local name -> the module
        # it is bound to, or None where a non-import binding shadows it.
        self.scopes: list[dict[str, str | None]] = []
        self.module_strings: set[str] = set()  # pycni module names written as strings
        self.dynamic_attrs: set[str] = set()  # attributes of importlib.import_module(...)

    def use(self, module: str, name: str) -> None:
        if module != self.own:
            self.index.use(module, name, self.where)

    def bindings(self, body: list[ast.stmt], args: ast.arguments | None) -> dict[str, str | None]:
        """The names a scope binds: imports of modules, and the rest as shadows."""
        out: dict[str, str | None] = {}
        if args is not None:
            for a in [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]:
                if a is not None:
                    out[a.arg] = None
        stack: list[ast.AST] = list(body)
        while stack:
            node = stack.pop()
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                out.setdefault(node.name, None)
                continue  # its own scope
            if isinstance(node, ast.Lambda):
                continue
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.asname:
                        out[alias.asname] = alias.name
                    else:
                        top = alias.name.split(".")[0]
                        out[top] = top
            elif isinstance(node, ast.ImportFrom):
                source = resolve_from(node, self.package)
                for alias in node.names:
                    full = f"{source}.{alias.name}"
                    local = alias.asname or alias.name
                    out[local] = full if full in self.index.modules else None
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                out.setdefault(node.id, None)
            elif isinstance(node, ast.arg):
                out.setdefault(node.arg, None)
            stack.extend(ast.iter_child_nodes(node))
        return out

    def run(self, tree: ast.Module) -> None:
        self.scopes.append(self.bindings(tree.body, None))
        self.visit(tree)
        self.finish()

    def _function(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> None:
        for d in [*node.args.defaults, *node.args.kw_defaults]:
            if d is not None:
                self.visit(d)
        if not isinstance(node, ast.Lambda):
            for deco in node.decorator_list:
                self.visit(deco)
            if node.returns is not None:
                self.visit(node.returns)
        body: list[ast.stmt] = node.body if isinstance(node.body, list) else [ast.Expr(node.body)]
        self.scopes.append(self.bindings(body, node.args))
        for stmt in body:
            self.visit(stmt)
        for a in [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs]:
            if a.annotation is not None:
                self.visit(a.annotation)
        self.scopes.pop()

    visit_FunctionDef = visit_AsyncFunctionDef = visit_Lambda = _function

    def lookup(self, name: str) -> str | None:
        for scope in reversed(self.scopes):
            if name in scope:
                return scope[name]
        return None

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        source = resolve_from(node, self.package)
        for alias in node.names:
            if alias.name != "*":
                self.use(source, alias.name)

    def _module_of(self, node: ast.expr) -> str | None:
        """The module an expression names (``m``, ``pycni.a.b``), if it names one."""
        if isinstance(node, ast.Name):
            return self.lookup(node.id)
        if isinstance(node, ast.Attribute):
            base = self._module_of(node.value)
            if base is not None and f"{base}.{node.attr}" in self.index.modules:
                return f"{base}.{node.attr}"
        return None

    def visit_Attribute(self, node: ast.Attribute) -> None:
        base = self._module_of(node.value)
        if base is not None:
            self.use(base, node.attr)
        elif isinstance(node.value, ast.Call) and _call_name(node.value) == "import_module":
            self.dynamic_attrs.add(node.attr)
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        if _call_name(node) in _ATTR_CALLS and len(node.args) >= 2:
            target, attr = node.args[0], node.args[1]
            module = self._module_of(target)
            if (
                module is not None
                and isinstance(attr, ast.Constant)
                and isinstance(attr.value, str)
            ):
                self.use(module, attr.value)
        self.generic_visit(node)

    def visit_Constant(self, node: ast.Constant) -> None:
        if isinstance(node.value, str):
            for dotted in _DOTTED.findall(node.value):
                if dotted in self.index.modules:
                    self.module_strings.add(dotted)
                else:
                    self.index.resolve_dotted(dotted, self.where)
            for source, names in _DOC_IMPORT.findall(node.value):  # generated code
                for name in _import_names(names):
                    self.use(source, name)

    def finish(self) -> None:
        for module in self.module_strings:
            for attr in self.dynamic_attrs:
                if attr in self.index.modules[module].defined:
                    self.use(module, attr)


def _call_name(node: ast.Call) -> str | None:
    func = node.func
    if isinstance(func, ast.Attribute):
        return func.attr
    if isinstance(func, ast.Name):
        return func.id
    return None


def _import_names(names: str) -> list[str]:
    """``a, b as c`` or ``(a,\n b)``: the imported names."""
    out = []
    for part in names.strip("()").split(","):
        words = part.split()
        if words:
            out.append(words[0])
    return out


def scan_python(index: Index, path: Path, where: str, own: str, package: str) -> None:
    try:
        tree = ast.parse(path.read_text(), str(path))
    except (SyntaxError, UnicodeDecodeError):
        return
    UseFinder(index, where, own, package).run(tree)


def scan_doc(index: Index, path: Path) -> None:
    text = path.read_text()
    where = str(path.relative_to(ROOT))
    for block in _FENCE.findall(text):
        try:
            tree = compile(block, where, "exec", ast.PyCF_ONLY_AST | ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
        except SyntaxError:  # a fragment: its import lines still say what it uses
            for source, names in _DOC_IMPORT.findall(block):
                for name in _import_names(names):
                    index.use(source, name, where)
            continue
        UseFinder(index, where, "", "").run(tree)
    for dotted in _DOTTED.findall(text):
        index.resolve_dotted(dotted, where)


def scan_surface_docs(index: Index) -> None:
    """Names the API pages show in backticks, for the documented modules that define them."""
    shown: set[str] = set()
    for rel in SURFACE_DOCS:
        path = ROOT / rel
        if not path.exists():
            continue
        for token in _BACKTICK.findall(path.read_text()):
            for word in re.findall(r"[A-Za-z_][\w.]*", token):
                shown.add(word)
                shown.update(word.split("."))
                if word.startswith(("spec.", "runtime.", "plugin.", "record.")):
                    index.resolve_dotted("pycni." + word, rel)
    for mod in index.modules.values():
        if not (mod.name in SURFACE_MODULES or mod.name.startswith(SURFACE_PREFIXES)):
            continue
        for name, kind in mod.defined.items():
            if (
                kind != "import"
                and name not in mod.imported
                and name not in mod.typing_names
                and not name.startswith("_")
                and name in shown
            ):
                index.documented[mod.name].add(name)


def build_index() -> Index:
    modules = {}
    for path in sorted((SRC / "pycni").rglob("*.py")):
        mod = load_module(path)
        modules[mod.name] = mod
    index = Index(modules)
    for mod in modules.values():
        package = mod.name if mod.path.name == "__init__.py" else mod.name.rpartition(".")[0]
        scan_python(index, mod.path, str(mod.path.relative_to(ROOT)), mod.name, package)
    for top in USER_DIRS:
        for path in sorted((ROOT / top).rglob("*.py")):
            rel = path.relative_to(ROOT)
            own = ".".join(rel.with_suffix("").parts)
            package = own.rpartition(".")[0]
            scan_python(index, path, str(rel), own, package)
    for pattern in DOC_GLOBS:
        for path in sorted(ROOT.glob(pattern)):
            scan_doc(index, path)
    pyproject = ROOT / "pyproject.toml"
    if pyproject.exists():
        for dotted in _DOTTED.findall(pyproject.read_text()):
            if ":" in dotted:
                index.resolve_dotted(dotted, "pyproject.toml")
    scan_surface_docs(index)
    return index


def isort_key(name: str) -> tuple[int, list[object]]:
    """RUF022's order: SCREAMING_CASE, then CamelCase, then the rest; natural sort within."""
    if len(name) > 1 and name.isupper():
        group = 0
    elif name[:1].isupper():
        group = 1
    else:
        group = 2
    natural: list[object] = [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name)]
    return group, natural


@dataclass
class Proposal:
    module: Module
    exports: list[str]
    unused_public: list[tuple[str, str]]  # (name, kind)
    private_used: dict[str, list[str]]  # underscored name -> files using it
    reexports: dict[str, str]  # exported name -> where it comes from
    missing: dict[str, list[str]]  # used from outside but not defined here -> files
    kept: list[str]  # exported though nothing else uses them
    type_only: list[str]  # used elsewhere, but exist only for the type checker


def propose(index: Index, mod: Module) -> Proposal:
    used = {name: sorted(where) for (m, name), where in index.uses.items() if m == mod.name}
    exports: set[str] = set()
    private_used: dict[str, list[str]] = {}
    missing: dict[str, list[str]] = {}
    for name, where in used.items():
        if name.startswith("__") and name.endswith("__"):
            continue  # __version__, __file__, __name__ ...
        if name in mod.defined or (mod.lazy and name in (mod.existing_all or ())):
            exports.add(name)
            if name.startswith("_"):
                private_used[name] = where
        else:
            missing[name] = where
    if "__version__" in used and "__version__" in mod.defined:
        exports.add("__version__")
    exports |= index.documented.get(mod.name, set())
    for name in mod.existing_all or ():
        # names served by __getattr__ cannot be seen, and a facade's re-exports of pycni
        # names are on purpose: keep the declared ones
        if mod.lazy or mod.imported.get(name, "").startswith("pycni."):
            exports.add(name)
    # Modules bound by ``import x`` (tests reach ``m.sys`` to patch it), typing helpers,
    # names that exist only for the type checker (a star import would fail on them; they are
    # imported under TYPE_CHECKING) and underscored names are never exported.
    if not mod.lazy:
        exports -= mod.type_only
    exports -= mod.plain_imports | mod.typing_names
    exports -= {n for n in exports if n.startswith("_") and not n.startswith("__")}
    # A type a caller sees in an exported signature is exported too (to the fixed point).
    todo = list(exports)
    while todo:
        for name in mod.signatures.get(todo.pop(), ()):
            if (
                name not in exports
                and mod.defined.get(name) in ("class", "variable")
                and name not in mod.typing_names
                and (mod.lazy or name not in mod.type_only)
                and not name.startswith("_")
            ):
                exports.add(name)
                todo.append(name)
    unused = [
        (name, kind if name in mod.loads else f"{kind}, dead: not even used here")
        for name, kind in mod.defined.items()
        if kind != "import"
        and not name.startswith("_")
        and name not in exports
        and name not in mod.typing_names
    ]
    reexports = {n: mod.imported[n] for n in exports if n in mod.imported}
    return Proposal(
        mod,
        sorted(exports, key=isort_key),
        sorted(unused),
        private_used,
        reexports,
        missing,
        sorted(exports - used.keys(), key=isort_key),
        [] if mod.lazy else sorted(n for n in mod.type_only & used.keys() if n[:1] != "_"),
    )


def render_all(names: list[str]) -> str:
    if not names:
        return "__all__: list[str] = []\n"
    one_line = "__all__ = [" + ", ".join(f'"{n}"' for n in names) + "]"
    if len(one_line) <= 100:
        return one_line + "\n"
    return "__all__ = [\n" + "".join(f'    "{n}",\n' for n in names) + "]\n"


def insertion_line(mod: Module) -> int:
    """The line after which a new ``__all__`` goes: the end of the docstring and imports."""
    last = 0
    for node in mod.tree.body:
        docstring = (
            last == 0
            and isinstance(node, ast.Expr)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
        )
        # imports; TYPE_CHECKING = False and what only the type checker reads; an if/try
        # choosing between imports
        heading = (
            isinstance(node, ast.Import | ast.ImportFrom)
            or (isinstance(node, ast.Assign) and _targets(node.targets[0]) == ["TYPE_CHECKING"])
            or (isinstance(node, ast.If) and _targets(node.test) == ["TYPE_CHECKING"])
            or (
                isinstance(node, ast.If | ast.Try)
                and all(
                    isinstance(s, ast.Import | ast.ImportFrom | ast.Pass | ast.Expr)
                    for s in top_level([node])[1:]
                    if not isinstance(s, ast.If | ast.Try)
                )
            )
        )
        if docstring or heading:
            last = node.end_lineno or node.lineno
        else:
            break
    return last


def write(proposal: Proposal) -> bool:
    mod = proposal.module
    text = render_all(proposal.exports)
    lines = mod.path.read_text().splitlines(keepends=True)
    if mod.all_node is not None:
        start, end = mod.all_node.lineno - 1, mod.all_node.end_lineno or mod.all_node.lineno
        if "".join(lines[start:end]) == text:
            return False
        lines[start:end] = [text]
    else:
        at = insertion_line(mod)
        lines[at:at] = ["\n", text] if at else [text, "\n"] if lines else [text]
    mod.path.write_text("".join(lines))
    return True


def select(index: Index, args: list[str]) -> list[Module]:
    if not args:
        return list(index.modules.values())
    chosen: dict[str, Module] = {}
    for arg in args:
        path = Path(arg)
        if not path.is_absolute():
            path = Path.cwd() / path
        if path.exists():
            path = path.resolve()
            for mod in index.modules.values():
                if mod.path == path or (path.is_dir() and path in mod.path.parents):
                    chosen[mod.name] = mod
        elif arg in index.modules:
            prefix = arg + "."
            for name, mod in index.modules.items():
                if name == arg or name.startswith(prefix):
                    chosen[name] = mod
        else:
            sys.exit(f"exports: no module or path {arg!r}")
    return sorted(chosen.values(), key=lambda m: m.name)


def report(p: Proposal) -> str:
    mod = p.module
    out = [f"{mod.name}  ({mod.path.relative_to(ROOT)})"]
    state = (
        "none yet"
        if mod.existing_all is None
        else "same"
        if mod.existing_all == p.exports
        else f"was {mod.existing_all}"
    )
    out.append(f"  __all__ ({len(p.exports)}, {state}): {', '.join(p.exports) or '-'}")
    if p.reexports:
        out.append(
            "  re-exported: "
            + ", ".join(f"{n} (from {src})" for n, src in sorted(p.reexports.items()))
        )
    if p.type_only:
        out.append(
            f"  type-only (imported under TYPE_CHECKING, not exported): {', '.join(p.type_only)}"
        )
    if p.kept:
        out.append(
            "  kept though unused elsewhere (declared re-export, documented, or shown in an"
            f" exported signature): {', '.join(p.kept)}"
        )
    if p.unused_public:
        out.append(
            "  used nowhere else, no underscore: "
            + ", ".join(f"{n} ({k})" for n, k in p.unused_public)
        )
    for name, where in sorted(p.private_used.items()):
        out.append(f"  underscored but used elsewhere: {name} <- {', '.join(where)}")
    for name, where in sorted(p.missing.items()):
        out.append(f"  used but not defined here: {name} <- {', '.join(where)}")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("targets", nargs="*", help="files, directories or dotted module names")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true", help="set __all__ in the files")
    mode.add_argument("--check", action="store_true", help="exit 1 if any __all__ differs")
    parser.add_argument("--quiet", action="store_true", help="no per-module report")
    args = parser.parse_args(argv)
    index = build_index()
    proposals = [propose(index, mod) for mod in select(index, args.targets)]
    changed: list[Path] = []
    differs = []
    for p in proposals:
        if not args.quiet:
            print(report(p))
        if p.module.existing_all != p.exports:
            differs.append(p.module.name)
        if args.write and write(p):
            changed.append(p.module.path)
    if changed:
        ruff = Path(sys.executable).parent / "ruff"
        if ruff.exists():
            subprocess.run([str(ruff), "format", "-q", *map(str, changed)], check=False)
        print(f"exports: wrote __all__ in {len(changed)} file(s)", file=sys.stderr)
    if args.check and differs:
        print(
            f"exports: __all__ differs from the proposal in: {', '.join(differs)}", file=sys.stderr
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
