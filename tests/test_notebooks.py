"""Every notebook runs headless on the committed results (nbclient), as a reader would run it."""
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))


@pytest.mark.e2e  # a kernel per notebook
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_the_notebook_runs_without_error(path):
    nb = nbformat.read(path, as_version=4)
    NotebookClient(nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}).execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    assert not [o for o in outputs if o.output_type == "error"]
    assert any("text/markdown" in o.get("data", {}) or "text/html" in o.get("data", {}) for o in outputs)
    if path.stem != "0_all_runs":  # a section's notebook shows its figures inline
        assert any("image/png" in o.get("data", {}) for o in outputs)
