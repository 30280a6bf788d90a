"""The report as a small static site: ``results/site/index.html`` (every table and figure) and one page per run
behind a table row (``results/site/runs/<run>.html``, ``ark.report.page``), each row linking to its runs' pages.

Static HTML written with every text escaped; it needs no network and opens from ``file://`` (figures are read from
``../figures/`` beside it). The run pages hold each run's first ``max_queries`` queries with observations cut to
``observation_chars``, so the site stays small enough to commit.
"""
from __future__ import annotations

import html
import shutil
from pathlib import Path

from ark.errors import UserError
from ark.io import write_text_atomic
from ark.report.intervals import METHOD
from ark.report.page import page_data, write_page
from ark.report.tables.table import cell_text

MAX_QUERIES = 10
OBSERVATION_CHARS = 1000

STYLE = """body{font:14px/1.45 system-ui,sans-serif;margin:0 auto;max-width:1400px;padding:10px 24px;color:#1d1d1f}
table{border-collapse:collapse;margin:6px 0 4px;font-size:13px}td,th{border:1px solid #ddd;padding:3px 7px;text-align:right}
td:first-child,th:first-child{text-align:left}th{background:#f2f4f8}.note{color:#444;max-width:1100px}
.runs a{margin-right:6px;font-size:12px}img{max-width:100%;border:1px solid #eee}nav a{margin-right:10px}
section{margin:26px 0}"""


def run_pages(tables, out_dir: Path, load, max_queries: int = MAX_QUERIES,
              observation_chars: int = OBSERVATION_CHARS) -> dict[str, str]:
    """Write the page of every run a table row names; {run directory: its page, relative to the site}.
    ``load(run_dir)`` gives (config, records, scores, gold, graph, metrics) or raises UserError."""
    pages = {}
    for table in tables:
        for dirs in table.runs.values():
            for run_dir in dirs:
                if run_dir in pages:
                    continue
                try:
                    config, records, scores, gold, graph, metrics = load(Path(run_dir))
                except UserError:  # a run the report read but whose records are gone: its row links nowhere
                    continue
                name = f"runs/{Path(run_dir).name}.html"
                write_page(out_dir / name, page_data(Path(run_dir).name, config, records, scores, gold, graph,
                                                     metrics, max_queries, observation_chars))
                pages[run_dir] = name
    return pages


def table_html(table, pages: dict[str, str]) -> str:
    e = html.escape
    head = "".join(f"<th>{e(c)}</th>" for c in table.columns) + "<th>runs</th>"
    rows = []
    for label, row in zip(table.labels, table.rows):
        links = " ".join(f'<a href="{e(pages[d])}">{i}</a>' for i, d in enumerate(table.runs.get(label, []), 1)
                         if d in pages)
        rows.append("<tr>" + "".join(f"<td>{e(cell_text(c))}</td>" for c in row) + f'<td class="runs">{links}</td></tr>')
    note = f'<p class="note">{e(table.note)}</p>' if table.note else ""
    return (f'<section id="{e(table.name)}"><h2>{e(table.title)}</h2><table><tr>{head}</tr>{"".join(rows)}</table>'
            f"{note}</section>")


def write_site(tables, figures: list[Path], out_dir: str | Path, load, max_queries: int = MAX_QUERIES) -> Path:
    """Write the site (anew: nothing stale lingers) and return its index page."""
    out_dir = Path(out_dir)
    shutil.rmtree(out_dir, ignore_errors=True)
    out_dir.mkdir(parents=True)
    pages = run_pages(tables, out_dir, load, max_queries)
    e = html.escape
    nav = " ".join(f'<a href="#{e(t.name)}">{e(t.name)}</a>' for t in tables)
    body = [f"<h1>ARK: the report</h1><nav>{nav}</nav>",
            "<p>Every table of the report stage with the runs behind each row (a row's numbers link to the pages of "
            f"its runs: their first {max_queries} queries, agents step by step). Intervals: {e(METHOD)}.</p>"]
    body += [table_html(t, pages) for t in tables]
    for figure in figures:
        src = Path("..") / figure.parent.name / figure.name
        body.append(f'<section><h2>{e(figure.stem)}</h2><img src="{e(src.as_posix())}" alt="{e(figure.stem)}">'
                    "</section>")
    index = out_dir / "index.html"
    write_text_atomic(index, "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>ARK report"
                      f"</title><style>{STYLE}</style></head><body>{''.join(body)}</body></html>\n")
    return index
