"""Notebooks are committed without outputs and with a papermill `parameters` cell (they run in CI)."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parents[2] / "notebooks").glob("*.ipynb"))


def test_the_eight_notebooks_are_there():
    assert [p.stem[:2] for p in NOTEBOOKS] == ["01", "02", "03", "04", "05", "06", "07", "08"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_outputs_are_stripped_and_parameters_are_tagged(path):
    book = nbformat.read(path, as_version=4)
    code = [c for c in book.cells if c.cell_type == "code"]
    assert all(not c.outputs and c.execution_count is None for c in code), f"{path.name} has outputs"
    tagged = [c for c in code if "parameters" in c.metadata.get("tags", [])]
    assert len(tagged) == 1 and "figures_dir" in tagged[0].source


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_plots_are_left_to_the_kernel_backend(path):
    """Inline in Jupyter (ipykernel's backend), still saved to files: nothing forces Agg."""
    source = "\n".join(c.source for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code")
    assert "matplotlib.use(" not in source and ("savefig" in source or "draw(" in source)


def test_jupyter_and_its_python_kernel_are_installed_beside_us():
    """`make notebooks` / `pip install -e .[notebooks]`: JupyterLab, and the kernel the suite executes
    the notebooks with (nbmake runs them through it), in this environment."""
    import sys
    from importlib.metadata import version

    from jupyter_client.kernelspec import KernelSpecManager

    scripts = Path(sys.executable).parent
    assert (scripts / "jupyter").exists() and (scripts / "jupyter-lab").exists(), \
        "install the notebooks extra: pip install -e '.[notebooks]'"
    assert version("jupyterlab")[0].isdigit()
    assert "python3" in KernelSpecManager().find_kernel_specs()  # (what `jupyter kernelspec list` reads, here)
