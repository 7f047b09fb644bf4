"""The built wheel (what `pip install .` installs) carries every data file the package reads.

An editable install reads the source tree, so a preset or grammar missing from the wheel goes
unnoticed there; this test builds the real wheel and looks inside it.
"""
from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = {"ir": "tilegraph/ir", "frontends": "tilegraph/frontends", "passes": "tilegraph/passes",
           "backends": "tilegraph/backends", "tilegraph": "tilegraph"}
DATA_SUFFIXES = (".lark", ".toml")


def package_data_files() -> list[str]:
    """Every grammar and preset in the source folders, as its path inside the installed package."""
    found = []
    for folder, installed in FOLDERS.items():
        for path in sorted((ROOT / folder).rglob("*")):
            if path.suffix in DATA_SUFFIXES and "__pycache__" not in path.parts:
                found.append(f"{installed}/{path.relative_to(ROOT / folder).as_posix()}")
    return found


def clean_copy(dest: Path) -> Path:
    """The source tree without build leftovers, which would hide a file the build config leaves out."""
    leftovers = shutil.ignore_patterns("__pycache__", "build", "dist", "*.egg-info", ".git", ".hypothesis",
                                       ".pytest_cache", "tests", "benchmarks")
    shutil.copytree(ROOT, dest, ignore=leftovers)
    return dest


def test_wheel_contains_every_grammar_and_preset(tmp_path):
    try:
        import setuptools  # noqa: F401
    except ImportError:
        pytest.skip("setuptools is not installed, so the wheel cannot be built without network access")
    source = clean_copy(tmp_path / "src")
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                            "-w", str(tmp_path / "wheel"), str(source)], capture_output=True, text=True)
    assert built.returncode == 0, built.stderr[-2000:]
    (wheel,) = (tmp_path / "wheel").glob("tilegraph-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    expected = package_data_files()
    assert any(name.endswith("hardware_presets/edge-npu.toml") for name in expected)
    assert [name for name in expected if name not in names] == []
    # the folders are installed under tilegraph.*, never as top-level packages of their own
    assert not any(name.split("/")[0] in ("ir", "frontends", "passes", "backends") for name in names)
