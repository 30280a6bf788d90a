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


def bars(frame, label: str, columns: list[str], xlabel: str, names=None):
    """Horizontal grouped bars of ``columns`` (one group per row, named by its ``label`` column), with each
    column's 95 % interval where the table has its bounds (``<column> lo``, ``<column> hi``); the legend beside the
    plot, where it covers no bar. ``names``: how the legend names a column."""
    import matplotlib.pyplot as plt
    import numpy as np

    names = names or (lambda c: c)
    rows = list(frame[label])
    fig, ax = plt.subplots(figsize=(9, 0.5 + 0.45 * len(rows) * max(1, len(columns)) ** 0.5))
    height = 0.8 / len(columns)
    for i, c in enumerate(columns):
        y = np.arange(len(rows)) + (i - (len(columns) - 1) / 2) * height
        values = frame[c].to_numpy(dtype=float)
        err = None
        if f"{c} lo" in frame and f"{c} hi" in frame:
            err = np.vstack([values - frame[f"{c} lo"].to_numpy(dtype=float),
                             frame[f"{c} hi"].to_numpy(dtype=float) - values])
        ax.barh(y, values, height, xerr=err, capsize=2, label=names(c), error_kw={"elinewidth": 0.8})
    ax.set_yticks(np.arange(len(rows)), rows, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel(xlabel)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1), frameon=False)
    fig.tight_layout()
    return ax


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
    from ark.report.settings import report_settings

    report = report_settings(resolved(compose([]).report))
    for p in execute_all(Path(report.notebooks), Path(report.executed)):
        print(p)
