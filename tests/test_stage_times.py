"""benchmarks/stage_times.py: a stage runs from its "Running stage" line to the next one, across midnight too."""
import pytest

from tests.conftest import load_benchmark


def load():
    return load_benchmark("stage_times")


def test_each_stage_lasts_until_the_next_one_starts_even_past_midnight():
    log = ["23:58:00 Stage 'download' didn't change, skipping",
           "23:58:10 Running stage 'evaluate@a':",
           "23:59:40 evaluate ... hit@1=0.1",
           "   a continuation line without a stamp",
           "23:59:50 Running stage 'distill@b':",
           "00:04:50 Updating lock file 'dvc.lock'",
           "00:05:00 Running stage 'report':",
           "00:05:30 Use `dvc push` to send your updates to remote storage."]
    times, total = load().stage_times(log)
    assert times == [("evaluate@a", 100.0), ("distill@b", 310.0), ("report", 30.0)]
    assert total == 450.0


def test_a_log_without_stamps_is_refused():
    with pytest.raises(SystemExit, match="no stamped lines"):
        load().stage_times(["Running stage 'report':"])


def test_busy_cores_is_the_non_idle_cpu_time_between_the_samples_nearest_a_stage(tmp_path):
    tick = __import__("os").sysconf("SC_CLK_TCK")
    # user nice system idle iowait irq softirq steal: 1.5 cores busy for 100 s, then 0.5 for 100 s; iowait is idle
    samples = tmp_path / "cpu.txt"
    samples.write_text(f"1000 cpu  0 0 0 0 0 0 0 0 0 0\n"
                       f"1100 cpu  {100 * tick} 0 {50 * tick} {50 * tick} 0 0 0 0 0 0\n"
                       f"1200 cpu  {130 * tick} 0 {70 * tick} {100 * tick} {50 * tick} 0 0 0 0 0\n")
    st = load()
    counter = st.busy_counter(samples)
    assert st.busy_cores(counter, 1002, 1098) == 1.5  # the nearest samples: 1000 and 1100
    assert st.busy_cores(counter, 1100, 1200) == 0.5
    assert st.busy_cores(counter, 1000, 1200) == 1.0
    assert st.busy_cores(counter, 1300, 1400) is None  # outside the samples


def test_the_report_gives_each_stage_and_kind_its_busy_cores(tmp_path, capsys):
    from datetime import datetime

    tick = __import__("os").sysconf("SC_CLK_TCK")
    t0 = datetime(2026, 11, 26, 10, 0, 0).timestamp()  # the log's stamps are local time of the samples' day
    samples = tmp_path / "cpu.txt"
    samples.write_text("".join(f"{int(t0) + 100 * i} cpu  {busy * tick} 0 0 0 0 0 0 0 0 0\n"
                               for i, busy in enumerate((0, 200, 250))))
    log = tmp_path / "run.log"
    log.write_text("10:00:00 Running stage 'evaluate@a':\n10:01:40 Running stage 'evaluate@b':\n10:03:20 done\n")
    load().main(str(log), str(samples))
    out = capsys.readouterr().out
    assert "evaluate@a" in out and "   2.00" in out.split("evaluate@a")[1].splitlines()[0]
    assert "   0.50" in out.split("evaluate@b")[1].splitlines()[0]
    assert "busy cores over the stages: 1.25 on average, 4.2 core-minutes" in out  # (200 + 50) s in 200 s
