"""benchmarks/graph_scale.py end to end at a tiny size: every step runs, the JSON and the plot are written."""
import json

import pytest

from tests.conftest import load_benchmark


def test_graph_scale_writes_its_figures_and_plot(tmp_path, capsys):
    pytest.importorskip("polars")
    bench = load_benchmark("graph_scale")
    out = tmp_path / "scale.json"
    assert bench.main(["--sizes", "2000", "--calls", "5", "--workdir", str(tmp_path / "work"), "--out", str(out)]) == 0
    (result,) = json.loads(out.read_text())["results"]
    assert result["nodes"] == result["build"]["nodes"] == 2000 and result["build"]["peak_rss_gb"] > 0
    latency = result["tools"]["latency"]
    assert latency["hubs: scan neighbor ids"]["p50_ms"] > 0 and latency["random: tool +query"]["p95_ms"] > 0
    assert result["tools"]["memory"]["csr_mb_per_million_edges"] > 20  # two entries of 11 bytes per edge
    assert out.with_suffix(".png").stat().st_size > 10_000
    assert "scan / CSR at p50" in capsys.readouterr().out
