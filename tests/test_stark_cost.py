"""benchmarks/stark_cost.py: calls, tokens, dollars and hours of the STaRK test splits from a run's records."""
import re
import sys

import pytest

from tests.conftest import compose_cfg, load_benchmark


def stark_cost():
    return load_benchmark("stark_cost")


def test_hours_shrink_with_concurrency_until_a_token_limit_sets_the_pace():
    hours = stark_cost().hours
    h8, rpm8, tpm8 = hours(2800, 20, 600_000, 3, 8, 2.0)  # queries, steps, tokens/query, agents, in flight, s/step
    assert h8 == pytest.approx(2800 * 20 * 2.0 / 8 / 3600)
    assert rpm8 == pytest.approx(8 * 3 * 60 / 2.0) and tpm8 == pytest.approx(rpm8 * 600_000 / (3 * 20))
    h16, rpm16, tpm16 = hours(2800, 20, 600_000, 3, 16, 2.0)
    assert (h16, rpm16, tpm16) == pytest.approx((h8 / 2, 2 * rpm8, 2 * tpm8))
    # a tokens-per-minute limit below what is asked: the split takes its tokens / the limit, at any concurrency
    assert [hours(2800, 20, 600_000, 3, c, 2.0, tpm=2e6)[0] for c in (8, 64)] == \
        pytest.approx([2800 * 600_000 / 2e6 / 60] * 2)
    assert hours(2800, 20, 600_000, 3, 8, 2.0, rpm=rpm8 / 4)[0] == pytest.approx(4 * h8)
    # one process's event loop at 10 ms a step makes at most 100 steps/s: 192 calls in flight at 1 s ask 192
    assert hours(2800, 20, 600_000, 3, 64, 1.0, cpu_ms=10)[:2] == pytest.approx((2800 * 3 * 20 / 100 / 3600, 6000))
    assert hours(2800, 20, 600_000, 3, 8, 1.0, cpu_ms=10)[0] == hours(2800, 20, 600_000, 3, 8, 1.0)[0]


@pytest.mark.e2e  # a benchmark script
def test_the_script_prints_each_split_at_each_concurrency(tiny_project, tmp_path, monkeypatch, capsys):
    from ark.stages import build_index, evaluate

    base = tiny_project + ["retriever.params.stemmer=null", "eval.progress=false"]
    build_index.run(compose_cfg(base))
    evaluate.run(compose_cfg(base + ["backbone=rules", "agent.n_agents=1", f"run.root={tmp_path}/runs"]))
    (run,) = (tmp_path / "runs").iterdir()
    monkeypatch.setattr(sys, "argv", ["stark_cost.py", str(run), "--steps", "10", "--concurrency", "8", "64"])
    stark_cost().main()
    out = capsys.readouterr().out
    # estimate, split, queries, calls, tokens, $, $ cached, calls in flight (3 agents a query), hours, RPM, TPM (M)
    rows = re.findall(r"^ +(observed|10 steps) +(AMAZON|MAG|PRIME|all) +[\d,]+ +[\d,]+ +[\d,.]+ +\$[\d,]+ +\$[\d,]+ +"
                      r"(24|192) +[\d.-]+ +[\d,]+ +[\d.]+$", out, flags=re.M)
    assert len(rows) == 2 * 4 * 2, out  # two estimates x (three graphs and all) x two concurrencies
    assert "1.5-3 s assumed per model call" in out
