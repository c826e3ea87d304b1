"""The install is split: a plain ``pip install .`` runs the offline demo and every command of the
file store; ``[web]`` adds the browser inbox, ``[postgres]`` the PostgreSQL store, ``[test]`` both
and the test tools (pyproject.toml). A command whose extra is missing says which to install, in one
``STOPPED:`` line, exit 1, with nothing on disk.

A missing package is simulated in a child Python by ``sys.modules[name] = None`` (``import name``
then raises ``ModuleNotFoundError`` naming it, as on a machine without it). ``scripts/install_size.py``
measures what each install weighs in a fresh venv.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from cli.output import EXTRAS

ROOT = Path(__file__).resolve().parents[1]
PROJECT = "hitl-publish"
#: What the product imports from the base install: import name → the requirement that brings it.
BASE_IMPORTS = {"agents": "openai-agents", "openai": "openai-agents", "pydantic": "pydantic",
                "pydantic_settings": "pydantic-settings", "filelock": "filelock",
                "genai_prices": "genai-prices", "httpx": "httpx", "tenacity": "tenacity",
                "standardwebhooks": "standardwebhooks", "jsonschema": "jsonschema"}
#: Packages a plain install lacks (the SDK's own dependencies bring starlette and uvicorn).
NOT_IN_A_PLAIN_INSTALL = ("jinja2", "psycopg", "psycopg_pool")


def _run(blocked: tuple[str, ...], argv: list[list[str]],
         env: dict[str, str] | None = None) -> list[dict[str, object]]:
    """Run ``run.main(args)`` for each ``args`` of ``argv`` in one child Python (environment: ours
    without ``HITL_*``/``OPENAI_*``, plus ``env``) in which no package of ``blocked`` can be
    imported; return ``[{"rc", "out", "err"}]``, one per command."""
    code = (
        "import contextlib, io, json, sys\n"
        f"for name in {blocked!r}:\n"
        "    sys.modules[name] = None\n"
        "import run\n"
        "results = []\n"
        f"for args in {argv!r}:\n"
        "    out, err = io.StringIO(), io.StringIO()\n"
        "    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):\n"
        "        rc = run.main(args)\n"
        "    results.append({'rc': rc, 'out': out.getvalue(), 'err': err.getvalue()})\n"
        "print(json.dumps(results))\n"
    )
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("HITL_", "OPENAI_"))}
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                          timeout=180, env={**clean, **(env or {})})
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.splitlines()[-1])


def _one_stopped_line(result: dict[str, object]) -> str:
    """The single ``STOPPED:`` line of ``result`` (exit 1, nothing on stdout, no traceback)."""
    err = str(result["err"])
    assert result["rc"] == 1 and result["out"] == "", result
    assert len(err.strip().splitlines()) == 1 and err.startswith("STOPPED: "), err
    assert "Traceback" not in err
    return err.strip()


@pytest.mark.parametrize("package", ["jinja2", "starlette", "uvicorn"])
def test_serve_without_the_web_extra_says_to_install_it_in_one_line(tmp_path, package):
    """``serve`` on a Python without a package of the web extra: one line naming the extra and the
    command that installs it, exit 1, no state dir created."""
    state = tmp_path / "s"
    [result] = _run((package,), [["--state-dir", str(state), "serve", "--port", "0"]])
    line = _one_stopped_line(result)
    assert "the browser inbox (serve) needs the web extra" in line, line
    assert f"no package {package!r}" in line, line
    assert line.endswith('python -m pip install ".[web]"'), line
    assert not state.exists() and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("how", ["--store", "HITL_STORE_URL"])
def test_a_database_store_without_the_postgres_extra_says_to_install_it_in_one_line(tmp_path, how):
    """``--store postgresql://…`` (or ``HITL_STORE_URL``) on a Python without psycopg: one line
    naming the postgres extra, never the URL's password, exit 1, nothing on disk."""
    state = tmp_path / "s"
    url = "postgresql://alice:s3cret-pw@127.0.0.1:1/db"
    store, env = (["--store", url], {}) if how == "--store" else ([], {"HITL_STORE_URL": url})
    argv = [["--state-dir", str(state), *store, *cmd] for cmd in
            (["list"], ["ledger"], ["doctor"], ["start", "--key", "k", "--draft", "D"],
             ["resume", "--task", "k", "--decision", "approve"])]
    results = _run(("psycopg",), argv, env)
    for result in results:
        line = _one_stopped_line(result)
        assert "the PostgreSQL store (--store postgresql://...) needs the postgres extra" in line, line
        assert line.endswith('python -m pip install ".[postgres]"'), line
        assert "s3cret-pw" not in line
    assert not state.exists() and list(tmp_path.iterdir()) == []


def test_the_file_store_commands_run_without_the_extras(tmp_path):
    """What a plain ``pip install .`` lacks (jinja2, psycopg, psycopg_pool) is never imported by a
    command of the file store: start, resume, status, list, ledger, show, doctor and expire all
    succeed with those packages unimportable, and the task completes with one ledger entry."""
    sd = ["--state-dir", str(tmp_path / "s")]
    argv = [sd + ["start", "--key", "k-1", "--draft", "Hello"],
            sd + ["resume", "--task", "k-1", "--decision", "approve", "--by", "alice"],
            sd + ["status", "--task", "k-1"], sd + ["list"], sd + ["--json", "ledger"],
            sd + ["show", "--task", "k-1"], sd + ["doctor"], sd + ["expire"]]
    results = _run(NOT_IN_A_PLAIN_INSTALL, argv)
    for args, result in zip(argv, results, strict=True):
        assert result["rc"] == 0, (args, result)
    assert "task k-1: completed" in str(results[2]["out"])
    assert len(json.loads(str(results[4]["out"]))["entries"]) == 1


def test_a_missing_package_of_the_base_install_says_pip_install_dot():
    """A package outside every extra (the SDK's, when the venv is not active): the line says to
    activate the venv or ``python -m pip install .``, never an extra."""
    from cli.output import unexpected

    exc = ModuleNotFoundError("No module named 'agents'", name="agents")
    line = unexpected(exc)
    assert line.startswith("the package 'agents' is not installed in this Python")
    assert line.endswith("or install: python -m pip install .") and "extra" not in line


def _requirement_name(requirement: str) -> str:
    """``"psycopg[binary]>=3.1,<4"`` → ``"psycopg"`` (PEP 503-normalised, ``_`` for ``-``)."""
    name = re.match(r"[A-Za-z0-9._-]+", requirement.strip())
    assert name, requirement
    return re.sub(r"[-_.]+", "_", name.group()).lower()


def test_pyproject_extras_match_what_the_product_imports():
    """pyproject.toml: the base dependencies hold none of the extras' packages; every package that
    :data:`cli.output.EXTRAS` names is in the extra it names; ``[test]`` pulls every extra;
    every third-party package a product module imports is in the base install or in EXTRAS."""
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    base = {_requirement_name(r) for r in project["dependencies"]}
    extras = {name: {_requirement_name(r) for r in reqs}
              for name, reqs in project["optional-dependencies"].items()}
    for package, (extra, _surface) in EXTRAS.items():
        assert package in extras[extra], (package, extra)
        assert package not in base, f"{package} is in the base install: the {extra} extra is moot"
    assert any(r.replace(" ", "") == f"{PROJECT}[web,postgres]"
               for r in project["optional-dependencies"]["test"]), "the test extra must pull web and postgres"
    for import_name, requirement in BASE_IMPORTS.items():
        assert _requirement_name(requirement) in base, (import_name, requirement)

    sys.path.insert(0, str(ROOT / "tests"))
    import test_imports

    own = {name.split(".")[0] for name in test_imports.MODULES} | {"__future__"}
    imported = {m.split(".")[0] for name, path in test_imports.MODULES.items()
                for m in test_imports._imports(name, path)}
    third_party = {m for m in imported if m not in own and m not in sys.stdlib_module_names}
    undeclared = third_party - set(BASE_IMPORTS) - set(EXTRAS)
    assert not undeclared, f"imported but in no install of pyproject.toml: {sorted(undeclared)}"
