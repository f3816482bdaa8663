"""The package's shape: small modules, and every folder documented with what it may import."""

from __future__ import annotations

from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[2] / "bench"
FOLDERS = ("core", "cluster", "launch", "jobs", "experiments", "validate", "analysis", "render", "commands", "worker")


def test_no_module_is_over_300_lines():
    long = {str(p.relative_to(PKG)): n for p in PKG.rglob("*.py") if (n := len(p.read_text().splitlines())) > 300}
    assert long == {}


@pytest.mark.parametrize("folder", FOLDERS)
def test_every_folder_says_what_it_holds_and_may_import(folder):
    doc = (PKG / folder / "__init__.py").read_text()
    assert doc.startswith('"""') and "import" in doc.split("\n")[0]
    readme = (PKG / "README.md").read_text()
    assert f"`{folder}/`" in readme
    # every module of the folder is named in bench/README.md's table
    for mod in sorted(p.stem for p in (PKG / folder).glob("*.py") if not p.stem.startswith("__")):
        assert f"`{mod}`" in readme, (folder, mod)


def test_top_level_holds_only_the_entry_points():
    assert sorted(p.name for p in PKG.glob("*.py")) == ["__init__.py", "__main__.py", "cli.py"]
