"""benchmarks/cpu_floor.py: the arithmetic it counts and the measured minutes it reads beside it."""
import math

import torch

from tests.conftest import load_benchmark


def load():
    return load_benchmark("cpu_floor")


def test_linear_layers_are_counted_in_multiply_adds_per_token_and_named_ones_left_out():
    model = torch.nn.ModuleDict({"body": torch.nn.Linear(4, 3), "lm_head": torch.nn.Linear(3, 2),
                                 "norm": torch.nn.LayerNorm(3)})
    floor = load()
    assert floor.linear_macs(model) == 4 * 3 + 3 * 2
    assert floor.linear_macs(model, skip=("lm_head",)) == 12


def test_the_measured_minutes_come_from_the_per_stage_table_only(tmp_path):
    table = tmp_path / "run.stages.txt"
    table.write_text("stage     min\nbuild_index@biokg-dense   9.53\ndistill   8.00\n\n"
                     "stage kind   min\nevaluate   29.33\ndistill   8.00\n\n92 stages run; the log spans 58.1 min\n")
    assert load().stage_minutes(str(table)) == {"build_index@biokg-dense": 9.53, "distill": 8.0}


def test_a_matrix_product_rate_is_measured():
    assert load().gemm_gflops(torch.float32, n=64, seconds=0.01) > 0


def test_an_embedded_rows_floor_is_its_arithmetic_and_the_bytes_each_decode_step_reads(tmp_path, monkeypatch):
    """A row's floor from its committed stats.json (tokens a query), on a tiny model: the memory floor of a reply
    decoded alone reads every weight per generated token; with the run's rows in flight the weights are shared."""
    import json

    from transformers import LlamaConfig, LlamaForCausalLM

    floor = load()
    run = tmp_path / "results" / "evaluate" / "student-synthetic"
    run.mkdir(parents=True)
    (run / "stats.json").write_text(json.dumps({"prompt_tokens": 6000, "completion_tokens": 400, "steps_mean": 2.0}))
    (run / "metrics.json").write_text(json.dumps({"n_queries": 2}))
    (run / "config.yaml").write_text("agent: {n_agents: 1}\neval: {concurrency: 4}\n")
    monkeypatch.chdir(tmp_path)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=100, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                                         num_key_value_heads=1, intermediate_size=32, tie_word_embeddings=True))
    f = floor.evaluation_floor("student-synthetic", model, "float32", rate=1.0, bandwidth=1.0)
    weights = 4 * sum(p.numel() for p in model.parameters())
    assert f["prompt_tokens"] == 3000 and f["completion_tokens"] == 200 and f["rows"] == 4
    kv = 4 * (2 * 2 * 1 * 8) * 1500  # float32 key and value, 2 layers, 1 head of 8, over a 1,500-token context
    assert math.isclose(f["memory_s_1_row"], 200 * (weights + kv) / 1e9)
    assert math.isclose(f["memory_s_4_rows"], 200 * (weights / 4 + kv) / 1e9)
    assert f["arithmetic_s"] > 2 * floor.linear_macs(model, skip=("lm_head",)) * 3200 / 1e9
    assert floor.evaluation_floor("base-synthetic", model, "float32", 1.0, 1.0) is None  # no such row here


def test_the_measured_seconds_a_query_come_from_the_embedded_rows_table(tmp_path):
    table = tmp_path / "rows.md"
    table.write_text("| entry | queries | processor | s_per_query |\n|---|---|---|---|\n"
                     "| student-synthetic | 60 | AMD EPYC | 13.6 |\n| base-synthetic | 40 | AMD EPYC | 0.3 |\n")
    assert load().row_seconds(str(table)) == {"student-synthetic": 13.6, "base-synthetic": 0.3}
    assert load().bandwidth_gbs(mib=8, seconds=0.01) > 0
