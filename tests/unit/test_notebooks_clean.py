"""Notebooks are committed without outputs and with a papermill `parameters` cell (they run in CI)."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parents[2] / "notebooks").glob("*.ipynb"))


def test_the_six_notebooks_are_there():
    assert [p.stem[:2] for p in NOTEBOOKS] == ["01", "02", "03", "04", "05", "06"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_outputs_are_stripped_and_parameters_are_tagged(path):
    book = nbformat.read(path, as_version=4)
    code = [c for c in book.cells if c.cell_type == "code"]
    assert all(not c.outputs and c.execution_count is None for c in code), f"{path.name} has outputs"
    tagged = [c for c in code if "parameters" in c.metadata.get("tags", [])]
    assert len(tagged) == 1 and "figures_dir" in tagged[0].source
