"""Loaded first in every pytest process (`-p tests.plugin_imports` in setup.cfg's addopts, before the
installed plugins): what the suite's own processes need not import.

jsonschema imports `rfc3987_syntax` when it is installed (JupyterLab's event schemas bring it) and that
module builds eight IRI grammars as it is imported: 3.4 CPU-seconds in each pytest process, which
imports jsonschema through nbformat (nbmake, the notebook checks). The schemas the suite validates
(nbformat's) check no IRI, so the pytest processes go without it; a Jupyter server, a process of its
own, still has it."""

from __future__ import annotations

import sys

sys.modules.setdefault("rfc3987_syntax", None)  # type: ignore[arg-type] - (None: "not there" to an import)
