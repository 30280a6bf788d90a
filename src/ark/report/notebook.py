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
