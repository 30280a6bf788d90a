"""What the notebooks (``notebooks/``) show: the report's tables and figures, read from ``results/`` only."""
from __future__ import annotations

from pathlib import Path

RESULTS = Path("../results")  # notebooks run from notebooks/


def table(name: str, results: Path = RESULTS):
    """Display a report table's Markdown (title, notes, runs) and return its CSV as a DataFrame."""
    import pandas as pd
    from IPython.display import Markdown, display

    display(Markdown((results / "tables" / f"{name}.md").read_text()))
    return pd.read_csv(results / "tables" / f"{name}.csv")


def figure(name: str, results: Path = RESULTS) -> None:
    """Display a report figure (a missing one is an error: run `dvc repro report`)."""
    from IPython.display import Image, display

    path = results / "figures" / f"{name}.png"
    if not path.exists():
        raise FileNotFoundError(f"{path} not written: run `dvc repro report`")
    display(Image(filename=str(path)))


def execute_all(notebooks: Path, out: Path) -> list[Path]:
    """Run every notebook of ``notebooks`` headless (from there, as a reader would) and write the executed copy,
    figures included, to ``out``; an error in a notebook raises. No timings are recorded, so the same results give
    the same files."""
    import nbformat
    from nbclient import NotebookClient

    out.mkdir(parents=True, exist_ok=True)
    written = []
    for path in sorted(Path(notebooks).glob("*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        NotebookClient(nb, timeout=300, kernel_name="python3", record_timing=False,
                       resources={"metadata": {"path": str(path.parent)}}).execute()
        nb.metadata.pop("widgets", None)
        nbformat.write(nb, out / path.name)
        written.append(out / path.name)
    return written


if __name__ == "__main__":  # python -m ark.report.notebook: the executed copies, as the report stage writes them
    from ark.config import compose, resolved

    report = resolved(compose([]).report)
    for p in execute_all(Path(report["notebooks"]), Path(report["executed"])):
        print(p)
