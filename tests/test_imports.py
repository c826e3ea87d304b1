"""The product modules (``run.py``, ``agent/``, ``tools/``, ``cli/``, ``state/``, ``workflow/``) import each
other as a DAG: no cycle, counting imports inside functions too (an import hidden in a function is
still a cycle, only a deferred one). ``state/`` is the bottom layer, ``state/fileio.py`` a leaf."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("agent", "tools", "cli", "state", "workflow")


def _modules() -> dict[str, Path]:
    """Dotted module name → file, for every product module."""
    found = {"run": ROOT / "run.py"}
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            found[name] = path
    return found


MODULES = _modules()


def _imports(name: str, path: Path) -> dict[str, int]:
    """Every module ``name`` imports (project modules and third-party alike), top level and inside
    functions, relative imports resolved: ``{module: first line}``. ``from pkg import mod`` counts
    as an import of ``pkg.mod`` when that is a module; ``if TYPE_CHECKING:`` blocks are skipped
    (they never run)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip |= {id(n) for stmt in node.body for n in ast.walk(stmt)}
    out: dict[str, int] = {}
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            for alias in node.names:
                out.setdefault(alias.name, node.lineno)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - (node.level - 1)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            out.setdefault(module, node.lineno)
            for alias in node.names:
                if f"{module}.{alias.name}" in MODULES:
                    out.setdefault(f"{module}.{alias.name}", node.lineno)
    return out


def _graph() -> dict[str, set[str]]:
    """Product module → the product modules it imports (a package's ``__init__`` counted as the
    package: importing ``state.fileio`` runs ``state/__init__.py`` too)."""
    graph: dict[str, set[str]] = {}
    for name, path in MODULES.items():
        deps = set()
        for module in _imports(name, path):
            parts = module.split(".")
            for i in range(1, len(parts) + 1):  # a.b.c imports a, a.b and a.b.c
                if ".".join(parts[:i]) in MODULES:
                    deps.add(".".join(parts[:i]))
        deps.discard(name)
        graph[name] = deps
    return graph


def _find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle as ``[a, b, …, a]``, or None if ``graph`` is a DAG."""
    state: dict[str, int] = {}  # 1 on the stack, 2 done
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for dep in sorted(graph[node]):
            if state.get(dep) == 1:
                return stack[stack.index(dep):] + [dep]
            if dep not in state:
                found = visit(dep)
                if found:
                    return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def test_the_scan_sees_imports_inside_functions_and_relative_ones():
    """The parser the DAG test relies on: a function-level and a relative import are edges."""
    graph = _graph()
    assert "state.errors" in graph["state.fileio"]  # ``from .errors import Refused``
    assert "workflow.ops.doctor" in graph["run"]  # imported inside ``run.main``
    assert _find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]


def test_product_modules_form_a_dag():
    cycle = _find_cycle(_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_packages_form_a_dag_too():
    """Between packages as well: ``state`` ← ``workflow`` ← ``tools`` / ``agent`` ← ``run``, so no
    package imports one that imports it back (not even through different modules)."""
    packages: dict[str, set[str]] = {}
    for name, deps in _graph().items():
        top = name.split(".")[0]
        packages.setdefault(top, set()).update(d.split(".")[0] for d in deps if d.split(".")[0] != top)
    cycle = _find_cycle(packages)
    assert cycle is None, "package import cycle: " + " -> ".join(cycle or [])


def test_the_library_never_imports_the_application():
    """No module under ``state/`` or ``workflow/`` imports ``agent``, ``tools``, ``cli`` (the
    publisher's command line) or ``run``, at the top or inside a function: copied alone into
    another project, the two folders give the same guarantees around that project's own agent
    and tool (the engine sees an application only through ``workflow.application.Application``)."""
    bad = []
    for name, path in MODULES.items():
        if name.split(".")[0] not in ("state", "workflow"):
            continue
        for module, line in _imports(name, path).items():
            if module.split(".")[0] in ("agent", "tools", "cli", "run"):
                bad.append(f"{path.relative_to(ROOT)}:{line} imports {module}")
    assert bad == []


def test_state_never_imports_the_sdk_or_the_layers_above_it():
    bad = []
    for name, path in MODULES.items():
        if name.split(".")[0] != "state":
            continue
        for module, line in _imports(name, path).items():
            top = module.split(".")[0]
            if top in ("agents", "openai", "workflow", "agent", "tools", "run"):
                bad.append(f"{path.relative_to(ROOT)}:{line} imports {module}")
    assert bad == []


def test_state_files_is_a_leaf():
    """``state/fileio.py`` imports nothing of ours except ``state.errors`` (and its package)."""
    ours = {m for m in _imports("state.fileio", MODULES["state.fileio"])
            if m.split(".")[0] in (*PACKAGES, "run")}
    assert ours <= {"state.errors", "state"}, ours


def test_public_api_is_the_documented_list_and_importing_it_never_imports_the_sdk():
    """``workflow/__init__.py`` names the public API (``__all__``) and imports each name from its
    module on first use (PEP 562 ``__getattr__``): importing the package, a read-only module under
    it or the read-only names (decisions, stores, tasks) leaves the SDK unimported, and every name
    of ``__all__`` resolves to the object its module defines."""
    import subprocess
    import sys

    code = (
        "import sys, workflow, workflow.observe.views\n"
        "assert 'agents' not in sys.modules, 'import workflow imported the SDK'\n"
        "from workflow import Approve, Reject, Refused, Task, TaskStore, open_store, read_task\n"
        "assert 'agents' not in sys.modules, 'a read-only name imported the SDK'\n"
        "import importlib\n"
        "for name in workflow.__all__:\n"
        "    home = importlib.import_module(workflow._HOME[name])\n"
        "    assert getattr(workflow, name) is getattr(home, name), name\n"
        "print(' '.join(workflow.__all__))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["Application", "start", "decide", "Approve", "Reject", "read_task",
                                   "open_store", "effect_tool", "Effect", "Refused", "TaskStore", "Service",
                                   "NotSent", "MayHaveActed", "Conflict", "settle", "fail", "evaluate", "Task",
                                   "Engine"]
