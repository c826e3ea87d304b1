"""One home per concern, and a package that installs: where each kind of code lives is tested, so a
moved file cannot silently fall out of the checks (tests/test_structure.py and tests/test_imports.py
walk every sub-folder too)."""

from __future__ import annotations

import fnmatch
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LIBRARY = ("state", "workflow")
PRODUCT = ("state", "workflow", "agent", "tools")


def _modules(*tops: str) -> list[Path]:
    return [p for top in tops for p in sorted((ROOT / top).rglob("*.py"))]


def _pyproject() -> dict:
    if sys.version_info < (3, 11):
        pytest.skip("tomllib is in the standard library from Python 3.11")
    import tomllib
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def test_every_store_class_lives_under_state():
    """Storage has one home: a class named ``…Store`` is defined under ``state/`` only."""
    found = {p.relative_to(ROOT).as_posix() for p in _modules(*PRODUCT)
             if re.search(r"^class \w*Store\b", p.read_text(encoding="utf-8"), re.M)}
    assert found and all(f.startswith("state/") for f in found), found


def test_sql_migrations_live_beside_the_postgres_store():
    sql = {p.relative_to(ROOT).as_posix() for p in ROOT.rglob("*.sql")
           if not {".venv", "build", ".git"} & set(p.relative_to(ROOT).parts)}
    assert sql and all(s.startswith("state/postgres/migrations/") for s in sql), sql


def test_every_folder_of_the_library_is_a_package_the_install_finds():
    """``pip install .`` installs what setuptools' ``packages.find`` matches: each folder holding
    Python code under ``state/`` and ``workflow/`` is a package (``__init__.py``) and matched."""
    include = _pyproject()["tool"]["setuptools"]["packages"]["find"]["include"]
    folders = {p.parent for p in _modules(*LIBRARY)}
    for folder in folders:
        assert (folder / "__init__.py").exists(), f"{folder.relative_to(ROOT)} has no __init__.py"
        dotted = ".".join(folder.relative_to(ROOT).parts)
        assert any(fnmatch.fnmatchcase(dotted, pattern) for pattern in include), dotted
    assert not any(fnmatch.fnmatchcase(app, pattern) for app in ("agent", "tools", "run", "cli")
                   for pattern in include), "the application is not installed as a library"


def test_the_library_data_files_are_installed_with_it():
    """The SQL migrations and the inbox's templates are package data: without them an installed
    library could not open a database or serve the inbox."""
    data = _pyproject()["tool"]["setuptools"]["package-data"]
    needed = [p for p in (ROOT / "state" / "postgres" / "migrations").glob("*.sql")]
    needed += [p for p in (ROOT / "workflow" / "review" / "web_assets").rglob("*") if p.is_file()]
    assert needed
    for path in needed:
        rel = path.relative_to(ROOT)
        owners = [pkg for pkg in data if rel.as_posix().startswith(pkg.replace(".", "/") + "/")]
        assert owners, f"{rel} belongs to no package with package data"
        inside = path.relative_to(ROOT / owners[0].replace(".", "/")).as_posix()
        assert any(fnmatch.fnmatchcase(inside, g) for g in data[owners[0]]), f"{rel} is not installed"
