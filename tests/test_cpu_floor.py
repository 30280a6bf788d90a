"""benchmarks/cpu_floor.py: the arithmetic it counts and the measured minutes it reads beside it."""
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
