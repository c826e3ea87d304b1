"""What each install of this project weighs: a fresh venv per extra, then the size of its site-packages.

    python benchmarks/install_size.py [--extras plain,web,postgres,test] [--top 6]

For each of ``plain`` (``pip install .``: the offline demo and the file store), ``web`` (the browser
inbox), ``postgres`` (the PostgreSQL store) and ``test`` (both, plus pytest, respx, hypothesis and
Playwright: the README's quick start), creates a venv in a temp dir with this Python, installs this
folder into it with pip (from whatever index pip is configured with; its cache makes reruns
quicker), and prints the size of the venv's site-packages in MiB: on disk (allocated blocks, what
``du -sh`` shows; the apparent size where the OS reports no blocks) and the files' apparent size,
each hard link counted once. Then what each install adds over ``plain`` on disk: the total and
its largest top-level packages. The venvs are deleted at the end. Numbers only; nothing is asserted.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: Name → what pip installs (relative to this folder).
INSTALLS = {"plain": ".", "web": ".[web]", "postgres": ".[postgres]", "test": ".[test]"}
MIB = 1024 * 1024


def entry_sizes(site_packages: Path) -> dict[str, tuple[int, int]]:
    """``{top-level entry: (bytes on disk, apparent bytes)}`` under ``site_packages``, each inode
    counted once; folders count their own blocks too, as ``du`` does."""
    seen: set[tuple[int, int]] = set()
    sizes: dict[str, tuple[int, int]] = {}
    for entry in site_packages.iterdir():
        disk = apparent = 0
        paths = [entry] if not entry.is_dir() else [
            Path(d) / name for d, dirs, files in os.walk(entry) for name in (*dirs, *files)] + [entry]
        for path in paths:
            st = path.lstat()
            if (st.st_dev, st.st_ino) in seen:
                continue
            seen.add((st.st_dev, st.st_ino))
            blocks = getattr(st, "st_blocks", None)
            disk += st.st_size if blocks is None else blocks * 512
            apparent += 0 if path.is_dir() and not path.is_symlink() else st.st_size
        sizes[entry.name] = (disk, apparent)
    return sizes


def install(where: Path, spec: str) -> dict[str, tuple[int, int]]:
    """Create a venv at ``where``, ``pip install spec`` into it (run in this folder); return
    :func:`entry_sizes` of its site-packages. Raises ``CalledProcessError`` if pip fails."""
    subprocess.run([sys.executable, "-m", "venv", str(where)], check=True)
    python = where / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    subprocess.run([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", spec],
                   cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    found = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                           check=True, capture_output=True, text=True).stdout.strip()
    return entry_sizes(Path(found))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--extras", default=",".join(INSTALLS),
                        help=f"comma-separated, of {', '.join(INSTALLS)} (default: all)")
    parser.add_argument("--top", type=int, default=6, help="largest entries shown per install")
    args = parser.parse_args()
    chosen = [name.strip() for name in args.extras.split(",") if name.strip()]
    unknown = [name for name in chosen if name not in INSTALLS]
    if unknown:
        parser.error(f"unknown install {unknown[0]!r}")
    if "plain" not in chosen:
        chosen.insert(0, "plain")  # the baseline the others are compared with
    print(f"Python {sys.version.split()[0]}; site-packages of a fresh venv per install, in MiB")
    print(f"  {'':28} {'on disk':>8} {'files':>8}")
    results: dict[str, dict[str, int]] = {}
    with tempfile.TemporaryDirectory(prefix="hitl-install-size-") as tmp:
        for name in chosen:
            sizes = install(Path(tmp) / name, INSTALLS[name])
            results[name] = {k: disk for k, (disk, _) in sizes.items()}
            apparent = sum(a for _, a in sizes.values())
            print(f"  pip install {INSTALLS[name]!r:16} {sum(results[name].values()) / MIB:8.1f} "
                  f"{apparent / MIB:8.1f}", flush=True)
    base = results["plain"]
    for name in chosen[1:]:
        added = {k: v - base.get(k, 0) for k, v in results[name].items() if v > base.get(k, 0)}
        largest = sorted(((k, v) for k, v in added.items()  # what rounds to 0.0 is left out
                          if not k.endswith(".dist-info") and v >= MIB // 20),
                         key=lambda kv: -kv[1])[:args.top]
        print(f"{name} adds {sum(added.values()) / MIB:.1f} on disk over plain; largest: "
              + ", ".join(f"{k} {v / MIB:.1f}" for k, v in largest))


if __name__ == "__main__":
    main()
