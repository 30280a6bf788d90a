"""SFT data from teacher trajectories: assistant-only labels, the inference rendering, nothing label-derived."""
import json
import math
import shutil
from pathlib import Path

import pytest

from ark.distill.sft import IGNORE, sample_turns, sft_samples, tokenize_sample
from ark.runs.store import load_run
from tests.conftest import compose_cfg


@pytest.fixture
def rules_run(tiny_project):
    """A rules 'teacher' run on the tiny graph (3 queries), as the evaluate stage writes it."""
    from ark.stages import build_index, evaluate

    overrides = tiny_project + ["retriever.params.stemmer=null", "backbone=rules", "agent.n_agents=2",
                                "eval.progress=false"]
    cfg = compose_cfg(overrides)
    build_index.run(cfg)
    result = evaluate.run(cfg)
    return cfg, result["run_dir"], overrides


def recipe(overrides: list[str]):
    """The typed distill settings ``overrides`` compose (what the stage passes to ``ark.distill.train``)."""
    from ark.config import resolved
    from ark.distill.settings import distill_settings

    return distill_settings(resolved(compose_cfg(overrides).distill))


def tools_of(cfg):
    from ark import build

    return build.toolbox(build.spec(cfg)).schemas()


def test_labels_are_exactly_the_assistant_turns(rules_run, tokenizer):
    cfg, run_dir, _ = rules_run
    _, records = load_run(run_dir)
    messages = records[0].agents[0].messages
    turns = sample_turns(messages, tools_of(cfg))
    sample = tokenize_sample(tokenizer, turns)
    ids, labels = sample["input_ids"], sample["labels"]
    assert len(ids) == len(labels)
    # contiguous labelled spans, each one assistant turn followed by its end-of-turn token
    spans, current = [], []
    for token, label in zip(ids, labels):
        if label == IGNORE:
            if current:
                spans.append(current)
            current = []
        else:
            assert label == token
            current.append(token)
    spans += [current] if current else []
    assistant = [t["content"] for t in turns if t["role"] == "assistant"]
    assert len(spans) == len(assistant) >= 2
    for span, text in zip(spans, assistant):
        assert tokenizer.decode(span) == text + tokenizer.eos_token
    # the unlabelled text is the prompt the model reads at inference, observations included
    prompt = tokenizer.decode([t for t, label in zip(ids, labels) if label == IGNORE])
    assert "Observation from search_in_graph" in prompt and "Question:" in prompt and "# Tools" in prompt


def test_a_long_trajectory_is_cut_after_the_last_turn_that_fits(rules_run, tokenizer):
    cfg, run_dir, _ = rules_run
    _, records = load_run(run_dir)
    turns = sample_turns(records[0].agents[0].messages, tools_of(cfg))
    full = tokenize_sample(tokenizer, turns)
    cut = tokenize_sample(tokenizer, turns, max_tokens=len(full["input_ids"]) - 1)
    assert cut is not None and len(cut["input_ids"]) < len(full["input_ids"])
    assert cut["input_ids"] == full["input_ids"][: len(cut["input_ids"])]
    assert tokenize_sample(tokenizer, turns, max_tokens=5) is None


def test_nothing_label_derived_enters_the_data(rules_run, tokenizer, tiny_project):
    """The samples are a function of the records and the tools only: other gold gives the same bytes."""
    from ark.io import read_jsonl, write_jsonl

    cfg, run_dir, _ = rules_run
    _, records = load_run(run_dir)
    before = list(sft_samples(records, tools_of(cfg), tokenizer))
    assert len(before) == 3 * 2  # every trajectory, none filtered by correctness
    queries = f"{cfg.dataset.queries_dir}/test.jsonl"
    write_jsonl(queries, [{**q, "answer_ids": [0]} for q in read_jsonl(queries)])
    after = list(sft_samples(load_run(run_dir)[1], tools_of(cfg), tokenizer))
    assert json.dumps(after) == json.dumps(before)
    assert all(set(s) == {"id", "agent", "input_ids", "labels"} for s in before)


@pytest.mark.e2e
def test_smoke_lora_training_on_cpu_saves_an_adapter_the_local_model_loads(rules_run, tokenizer, tmp_path):
    """distill=smoke: a few LoRA steps of a tiny random model on the teacher's samples, on CPU."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from ark.distill.train import is_timing, train_lora
    from ark.llm.weights import apply_adapter, fingerprint

    cfg, run_dir, _ = rules_run
    samples = list(sft_samples(load_run(run_dir)[1], tools_of(cfg), tokenizer))
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                         num_key_value_heads=1, intermediate_size=64, max_position_embeddings=4096)
    d = recipe(["distill=smoke"])
    report = train_lora(LlamaForCausalLM(config), tokenizer, samples[:4], samples[4:], d, tmp_path / "adapter")
    assert report["steps"] == 3 and report["best_eval_loss"] is not None and report["train_samples"] == 4
    assert (tmp_path / "adapter" / "adapter_config.json").exists()
    curve = json.loads((tmp_path / "adapter" / "curve.json").read_text())
    assert any("loss" in row for row in curve) and any("eval_loss" in row for row in curve)
    keys = ("num_tokens", "entropy", "mean_token_accuracy")  # trl's bookkeeping, kept by LabelledLossTrainer
    assert all(k in row for row in curve if "loss" in row for k in keys)
    counts = [0] + [row["num_tokens"] for row in curve if "loss" in row]  # one sample's tokens a step
    assert all(b - a in {len(s["input_ids"]) for s in samples[:4]} for a, b in zip(counts, counts[1:]))
    assert report["timings"]["train_seconds"] >= 0 and not any(is_timing(k) for row in curve for k in row)
    assert fingerprint(None, tmp_path / "adapter")["adapter_sha256"]
    torch.manual_seed(0)
    base = LlamaForCausalLM(config).eval()
    ids = torch.tensor([samples[0]["input_ids"][:16]])
    before = base(ids).logits
    after = apply_adapter(base, tmp_path / "adapter")(ids).logits
    assert not torch.allclose(before, after)  # the adapter learned something and loads on the base


@pytest.mark.e2e
def test_the_distill_stage_writes_an_adapter_with_its_model_card(rules_run, tokenizer, tmp_path):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from ark.stages import distill

    _, run_dir, overrides = rules_run
    dcfg = compose_cfg(overrides + ["distill=smoke", f"distill.teacher={Path(run_dir).parent}",
                                    f"distill.out={tmp_path}/student"])
    torch.manual_seed(0)
    tiny = LlamaForCausalLM(LlamaConfig(vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=1,
                                        num_attention_heads=2, num_key_value_heads=1, intermediate_size=64,
                                        max_position_embeddings=4096))
    result = distill.run(dcfg, tiny, tokenizer)
    out = tmp_path / "student"
    assert result["steps"] == 3 and (out / "adapter_config.json").exists() and (out / "curve.json").exists()
    card = (out / "README.md").read_text()
    assert "Teacher: `rules`" in card and "label-free" in card
    report = json.loads((out / "report.json").read_text())
    assert report["teachers"][0]["config"]["backbone"]["name"] == "rules" and "answer_ids" not in json.dumps(report)
    student = compose_cfg(["backbone=student", f"backbone.local.adapter={out}"]).backbone
    assert student.name == "student" and not student.local.constrained and student._target_.endswith(".LocalBackbone")
    logged = []  # the curve goes to W&B step by step (a stand-in for the stage's W&B run)
    distill.log_curve(type("Log", (), {"log": lambda self, row, step: logged.append((step, row))})(),
                      json.loads((out / "curve.json").read_text()))
    steps = [step for step, _ in logged]
    assert steps == sorted(steps) and steps[-1] == 3 and any("loss" in row for _, row in logged)


@pytest.mark.e2e
def test_a_retrained_student_is_the_same_student(rules_run, tokenizer, tmp_path):
    """Same data and seed: the same adapter directory content (the student's identity) and the same published files;
    only the git-ignored timing.json differs. A different seed is another student."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from ark.io import sha256_tree
    from ark.stages import distill

    _, run_dir, overrides = rules_run
    # retrained in place, as a rerun of the stage does; each result kept aside

    def train(seed: int = 0) -> tuple[Path, Path]:
        cfg = compose_cfg(overrides + ["distill=smoke", f"seed={seed}", f"distill.teacher={Path(run_dir).parent}",
                                       f"distill.out={tmp_path}/student", f"distill.publish={tmp_path}/published"])
        torch.manual_seed(0)
        tiny = LlamaForCausalLM(LlamaConfig(vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=1,
                                            num_attention_heads=2, num_key_value_heads=1, intermediate_size=64,
                                            max_position_embeddings=4096))
        result = distill.run(cfg, tiny, tokenizer)
        assert result["timings"]["train_seconds"] >= 0 and result["timings"]["seconds"] > 0
        kept = tmp_path / f"seed{seed}-{len(list(tmp_path.glob('seed*')))}"
        shutil.copytree(tmp_path / "student", kept / "student")
        shutil.copytree(tmp_path / "published", kept / "published")
        return kept / "student", kept / "published"

    (a, a_pub), (b, b_pub) = train(), train()
    assert sha256_tree(a) == sha256_tree(b) and not (a / "checkpoints").exists()
    assert sorted(p.name for p in a_pub.iterdir()) == sorted([*distill.PUBLISHED, distill.TIMINGS])
    assert all((a_pub / n).read_bytes() == (b_pub / n).read_bytes() for n in distill.PUBLISHED)
    assert "seconds" in json.loads((a_pub / distill.TIMINGS).read_text())
    assert "seconds" not in (a / "report.json").read_text() and "runtime" not in (a / "curve.json").read_text()
    other, _ = train(seed=1)
    assert sha256_tree(other) != sha256_tree(a)



def tiny_qwen3(attn: str, vocab: int = 512):
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(0)
    return Qwen3ForCausalLM(Qwen3Config(vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                        num_attention_heads=4, num_key_value_heads=2, head_dim=16, use_cache=False,
                                        attn_implementation=attn)).eval()


@pytest.mark.parametrize("attn", ["packed_sdpa", "packed_flex"])
def test_packed_attention_gives_each_sample_the_logits_it_has_alone(attn):
    """Packed attention on a row of two samples = each sample run on its own (no attention across them)."""
    import torch

    from ark.distill.attention import register

    model = tiny_qwen3(register(attn))
    a, b = torch.randint(0, 512, (1, 9)), torch.randint(0, 512, (1, 6))
    bounds = torch.tensor([0, 9, 15], dtype=torch.int32)
    with torch.no_grad():
        packed = model(input_ids=torch.cat([a, b], 1), position_ids=torch.cat([torch.arange(9), torch.arange(6)])[None],
                       cu_seq_lens_q=bounds, cu_seq_lens_k=bounds, max_length_q=9, max_length_k=9).logits
        alone_a, alone_b = model(input_ids=a).logits, model(input_ids=b).logits
        unpacked = model(input_ids=torch.cat([a, b], 1)).logits  # what attention across samples would give
    assert torch.allclose(packed[0, :9], alone_a[0], atol=1e-5)
    assert torch.allclose(packed[0, 9:], alone_b[0], atol=1e-5)
    assert not torch.allclose(unpacked[0, 9:], alone_b[0], atol=1e-3)


def test_packing_keeps_every_sample_once_within_the_row_size():
    import random

    from ark.distill.sft import pack, pack_bins

    rng = random.Random(0)
    lengths = [rng.randint(1, 100) for _ in range(300)]
    bins = pack_bins(lengths, 256)
    assert sorted(i for b in bins for i in b) == list(range(300))
    assert all(sum(lengths[i] for i in b) <= 256 for b in bins)
    assert sum(lengths) / (256 * len(bins)) > 0.95  # best-fit decreasing leaves little room unused
    samples = [{"input_ids": [n] * n, "labels": [-100] + [n] * (n - 1)} for n in lengths[:20]]
    rows = pack(samples, 256)
    assert sorted(n for r in rows for n in r["seq_lengths"]) == sorted(lengths[:20])
    assert all(len(r["input_ids"]) == len(r["labels"]) == sum(r["seq_lengths"]) <= 256 for r in rows)
    with pytest.raises(ValueError, match="does not fit"):
        pack_bins([300], 256)


@pytest.mark.e2e
def test_packed_training_through_trl_on_cpu(rules_run, tokenizer, tmp_path):
    """distill with pack=true: trl's padding-free rows, packed_sdpa attention, a finite loss."""
    from ark.distill.attention import register
    from ark.distill.train import train_lora

    cfg, run_dir, _ = rules_run
    samples = list(sft_samples(load_run(run_dir)[1], tools_of(cfg), tokenizer))
    d = recipe(["distill=smoke", "distill.pack=true", "distill.attn=packed_sdpa",
                     "distill.max_tokens=8192"])
    report = train_lora(tiny_qwen3(register(), len(tokenizer)).train(), tokenizer, samples[:4], samples[4:], d,
                        tmp_path / "adapter")
    assert report["train_rows"] < report["train_samples"] == 4  # several trajectories share a row
    assert report["best_eval_loss"] is not None and report["train_loss"] == report["train_loss"]  # not NaN


def test_the_flex_mask_keeps_attention_causal_within_each_sample_and_off_the_padding():
    import torch

    from ark.distill.attention import document_causal_mask

    allowed_at = document_causal_mask((0, 3, 7), 10, "cpu").mask_mod  # samples 0-2 and 3-6, then 3 padding tokens
    allowed = torch.tensor([[bool(allowed_at(0, 0, torch.tensor(q), torch.tensor(k))) for k in range(10)]
                            for q in range(10)])
    expected = torch.zeros(10, 10, dtype=torch.bool)
    expected[:3, :3] = torch.ones(3, 3).tril().bool()
    expected[3:7, 3:7] = torch.ones(4, 4).tril().bool()
    assert torch.equal(allowed, expected)  # tokens 7-9 (padding) attend to nothing and nothing attends to them


@pytest.mark.skipif(not __import__("torch").cuda.is_available(), reason="FlexAttention has no backward on a CPU")
def test_packed_flex_gives_the_loss_and_gradients_of_packed_sdpa_on_a_gpu():
    import torch

    from ark.distill.attention import register

    a, b = torch.randint(0, 512, (1, 300)), torch.randint(0, 512, (1, 200))
    bounds = torch.tensor([0, 300, 500], dtype=torch.int32, device="cuda")
    results = []
    for attn in ("packed_sdpa", "packed_flex"):
        model = tiny_qwen3(register(attn)).cuda().train()
        ids = torch.cat([a, b], 1).cuda()
        loss = model(input_ids=ids, labels=ids, position_ids=torch.cat([torch.arange(300), torch.arange(200)])[None].cuda(),
                     cu_seq_lens_q=bounds, cu_seq_lens_k=bounds, max_length_q=300, max_length_k=300).loss
        loss.backward()
        results.append((loss.item(), [p.grad.clone() for p in model.parameters()]))
    (sdpa_loss, sdpa_grads), (flex_loss, flex_grads) = results
    assert abs(sdpa_loss - flex_loss) < 1e-4
    assert all(torch.allclose(f, s, atol=1e-4) for f, s in zip(flex_grads, sdpa_grads))


@pytest.mark.e2e  # training steps
def test_the_recipe_may_recompute_every_nth_layer_only(tmp_path):
    from ark.distill.train import sft_config
    from ark.errors import UserError

    d = recipe(["distill=smoke", "distill.gradient_checkpointing=true", "distill.checkpoint_every=3"])
    args = sft_config(d, tmp_path, 0, has_val=False)
    field = "activation_checkpointing" if hasattr(args, "activation_checkpointing") else "gradient_checkpointing"
    assert getattr(args, field) is True and getattr(args, f"{field}_kwargs") == {"every_n_layers": 3}
    with pytest.raises(UserError, match="checkpoint_every"):  # the recipe checks itself
        recipe(["distill=smoke", "distill.checkpoint_every=0"])


@pytest.mark.parametrize("override,key", [("distill.lora.r=0", "distill.lora.r"), ("distill.device=tpu", "device"),
                                          ("distill.learning_rate=.nan", "learning_rate"),
                                          ("distill.pack=maybe", "distill.pack"), ("+distill.epoch=2", "epoch"),
                                          ("distill.teacher=[1,2]", "distill.teacher")])
def test_a_bad_recipe_is_one_error_naming_its_key(override, key):
    from ark.errors import UserError

    with pytest.raises(UserError, match=key):
        recipe(["distill=smoke", override])


@pytest.mark.parametrize("packed", [False, True])
def test_the_loss_from_the_labelled_logits_only_is_the_full_logits_loss(tokenizer, tmp_path, packed):
    """LabelledLossTrainer.compute_loss = transformers' loss over the full logits and trl's own compute_loss (value
    and LoRA gradients), unpacked (a padded batch of two) and packed (one padding-free row), while the model
    returns the logits of the labelled positions only."""
    import torch
    from trl import SFTTrainer

    from ark.distill.attention import register
    from ark.distill.train import trainer

    gen = torch.Generator().manual_seed(0)
    ids = [torch.randint(3, 512, (n,), generator=gen).tolist() for n in (40, 27)]
    # masked prefixes and gaps, labels in different places in each sample
    samples = [{"input_ids": ids[0], "labels": [IGNORE] * 12 + ids[0][12:20] + [IGNORE] * 10 + ids[0][30:]},
               {"input_ids": ids[1], "labels": ids[1][:3] + [IGNORE] * 17 + ids[1][20:]}]
    d = recipe(["distill=smoke", f"distill.pack={str(packed).lower()}",
                     f"distill.attn={'packed_sdpa' if packed else 'sdpa'}", "distill.max_tokens=128"])
    model = tiny_qwen3(register() if packed else "sdpa")
    t = trainer(model, tokenizer, samples, [], d, tmp_path)
    assert type(t).__name__ == "LabelledLossTrainer"
    batch = t._prepare_inputs(t.data_collator([t.train_dataset[i] for i in range(len(t.train_dataset))]))
    assert batch["input_ids"].shape[0] == (1 if packed else 2)
    with torch.no_grad():  # a nonzero adapter, so that its gradients are not all zero
        for name, w in t.model.named_parameters():
            if "lora_B" in name:
                w.normal_(0, 0.02, generator=gen)
    labels = batch["labels"]
    labelled = int((labels[:, 1:] != IGNORE).sum())
    assert labelled == 8 + 10 + 2 + 7  # packed: the collator masks each sample's first token (no cross-sample label)

    def loss_and_grads(compute, **kwargs):
        t.model.zero_grad()
        loss = compute(dict(batch), **kwargs)
        loss.backward()
        return loss.detach(), [w.grad.clone() for w in t.model.parameters() if w.requires_grad]

    full = lambda inputs, **kw: t.model(**inputs, **kw).loss  # noqa: E731  (labels in: the model's own loss)
    trl = lambda inputs, **kw: SFTTrainer.compute_loss(t, t.model, inputs, **kw)  # noqa: E731
    for n_items in (None, 3 * labelled):
        loss, grads = loss_and_grads(lambda inputs, **kw: t.compute_loss(t.model, inputs, **kw),
                                     num_items_in_batch=n_items)
        for reference in (full, trl):
            ref_loss, ref_grads = loss_and_grads(reference, num_items_in_batch=n_items)
            assert abs(float(loss) - float(ref_loss)) < 1e-5
            assert all(torch.allclose(g, r, atol=1e-6) for g, r in zip(grads, ref_grads))
    _, outputs = t.compute_loss(t.model, dict(batch), return_outputs=True)
    kept = int((labels[:, 1:] != IGNORE).any(0).sum())
    assert outputs.logits.shape[1] == kept < labels.shape[1] - 1  # the LM head ran on the labelled positions only


@pytest.mark.e2e
def test_the_throughput_benchmark_runs_a_toy_shape_on_cpu(tmp_path):
    """benchmarks/distill_throughput.py end to end on a toy architecture (the code path, not the figures)."""
    from tests.conftest import load_benchmark

    bench = load_benchmark("distill_throughput")
    report = bench.main(["--shape", "toy", "--device", "cpu", "--dtype", "fp32", "--paper", "--pack", "2048",
                         "--trajectories", "12", "--steps", "2", "--warmup", "1", "--attn", "packed_sdpa",
                         "--checkpoint-every", "2", "--out", str(tmp_path / "bench.json")])
    (result,) = report["results"]
    assert result["tokens"] > 0 and result["tokens_per_s"] > 0 and result["loss_finite"]
    assert json.loads((tmp_path / "bench.json").read_text())["linear_params"] == report["linear_params"] > 0
    trl = bench.main(["--trl", "--recipe", "smoke", "--shape", "toy", "--device", "cpu", "--trajectories", "6",
                      "--steps", "1", "--warmup", "1", "--set", "pack=true", "attn=packed_sdpa",
                      "gradient_checkpointing=true", "checkpoint_every=2", "lora.dropout=0"])
    (result,) = trl["results"]
    assert result["steps"] == 2 and result["tokens_per_s"] > 0 and all(math.isfinite(x) for x in result["losses"])
    with pytest.raises(SystemExit, match="no key 'lora.nope'"):
        bench.main(["--trl", "--recipe", "smoke", "--shape", "toy", "--device", "cpu", "--set", "lora.nope=1"])


@pytest.mark.e2e
def test_a_budget_student_is_the_training_on_its_first_queries_alone(rules_run, tokenizer, tmp_path):
    """distill.budgets: the adapter saved after the updates on the first query of each teacher run equals, bit for
    bit, the adapter of a training on those trajectories alone; it gets its own report and model card."""
    import shutil

    import torch
    from safetensors.torch import load_file
    from transformers import LlamaConfig, LlamaForCausalLM

    from ark.errors import UserError
    from ark.stages import distill

    _, run_dir, overrides = rules_run
    first = tmp_path / "first" / Path(run_dir).name  # the teacher run cut to its first query
    shutil.copytree(run_dir, first)
    records = (first / "records.jsonl").read_text().splitlines(keepends=True)
    (first / "records.jsonl").write_text(records[0])
    recipe = ["distill=smoke", "distill.max_steps=null", "distill.val_fraction=0", "distill.lora.dropout=0.1"]

    def train(teacher: Path, out: Path, budgets: str):
        torch.manual_seed(0)
        tiny = LlamaForCausalLM(LlamaConfig(vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=1,
                                            num_attention_heads=2, num_key_value_heads=1, intermediate_size=64,
                                            max_position_embeddings=4096))
        cfg = compose_cfg(overrides + recipe + [f"distill.teacher=[{teacher},{teacher}]", f"distill.out={out}",
                                                f"distill.budgets={budgets}",
                                                f"distill.publish={out.parent}-published/{out.name}"])
        return distill.run(cfg, tiny, tokenizer)

    whole = train(Path(run_dir), tmp_path / "a" / "student", "{small: 1}")
    alone = train(first, tmp_path / "b" / "student", "{all: 1}")
    n_agents = len(json.loads(records[0])["agents"])
    assert whole["steps"] == 2 * len(records) * n_agents and alone["steps"] == 2 * n_agents
    assert whole["budgets"] == {str(tmp_path / "a" / "small"): 2 * n_agents}
    small = load_file(tmp_path / "a" / "small" / "adapter_model.safetensors")
    reference = load_file(tmp_path / "b" / "student" / "adapter_model.safetensors")
    final = load_file(tmp_path / "a" / "student" / "adapter_model.safetensors")
    assert small.keys() == reference.keys()
    assert all(torch.equal(small[k], reference[k]) for k in small)
    assert not all(torch.equal(small[k], final[k]) for k in small)  # the later updates changed the whole student
    report = json.loads((tmp_path / "a-published" / "small" / "report.json").read_text())
    assert report["report"]["train_samples"] == 2 * n_agents and report["queries_per_teacher_run"] == 1
    assert "first 1 queries of each teacher run" in (tmp_path / "a" / "small" / "README.md").read_text()
    with pytest.raises(UserError, match="constant schedule"):
        cfg = compose_cfg(overrides + ["distill=smoke", f"distill.teacher={run_dir}", "distill.budgets={s: 1}",
                                       "distill.scheduler=cosine", f"distill.out={tmp_path}/c"])
        distill.run(cfg, None, tokenizer)


@pytest.mark.parametrize("out, publish, budgets, refusal", [
    ("a/student", "a/published", "{small: 1}", "would be a directory the training writes"),  # a/small twice
    ("a/student", "a/student", "null", "would be a directory the training writes"),
    ("a/student", "b/small", "{small: 1}", "two published students would share"),  # b/small: publish and budget
    ("a/student", "b/published", "{student: 1}", "two trained students would share"),  # a/student twice
    ("a/student", "b/published", "{small: 1}", None),  # apart: accepted
])
def test_distill_refuses_a_publish_that_is_a_directory_it_trains_into(tmp_path, out, publish, budgets, refusal):
    """Found after a whole training: with out and publish under one parent, a budget's published copy was its own
    trained directory (shutil.SameFileError at the end). Refused with the settings, before any model loads, as are
    two students sharing a directory."""
    from ark.errors import UserError

    overrides = ["distill=smoke", "distill.max_steps=null", "distill.val_fraction=0", f"distill.out={tmp_path / out}",
                 f"distill.publish={tmp_path / publish}", f"distill.budgets={budgets}"]
    if refusal is None:
        assert recipe(overrides).publish == str(tmp_path / publish)
        return
    with pytest.raises(UserError, match=refusal):
        recipe(overrides)


def test_the_validation_split_holds_out_a_publications_cases_together(monkeypatch):
    """Case reports of one publication share a family and a text: the held-out part is drawn by publication, any
    other query by its id; the units come from the query files the teacher runs name, not from their gold."""
    import ark.report.runs as runs
    from ark.data.queries import split_of
    from ark.stages.distill import held_out_units

    queries = {"phenopackets": [{"id": f"c{i}", "query": "q", "meta": {"pmid": f"p{i // 4}"}} for i in range(40)],
               "synthetic": [{"id": f"s{i}", "query": "q"} for i in range(5)]}
    seen = []

    def read(config, paths, limit=True):
        seen.append((config["queries"]["name"], paths, limit))
        return queries[config["queries"]["name"]]

    monkeypatch.setattr(runs, "queries_of_run", read)
    unit = held_out_units([{"queries": {"name": "phenopackets"}}, {"queries": {"name": "synthetic"}}], "/d")
    assert seen == [("phenopackets", ("paths.data=/d",), False), ("synthetic", ("paths.data=/d",), False)]
    assert unit["c5"] == "p1" and unit["s3"] == "s3"
    part = {i: split_of(u, (0.5, 0.5, 0.0)) for i, u in unit.items()}
    assert all(part[f"c{i}"] == part[f"c{i // 4 * 4}"] for i in range(40))  # a publication's cases together
    assert {part[f"c{i}"] for i in range(40)} == {"train", "val"}


def test_a_querys_repeated_trajectory_is_one_sample_with_distinct():
    from ark.distill.sft import distinct

    a, b = {"id": "q1", "input_ids": [1, 2, 3]}, {"id": "q1", "input_ids": [1, 2, 4]}
    same_tokens_other_query = {"id": "q2", "input_ids": [1, 2, 3]}
    assert distinct([a, dict(a), b, same_tokens_other_query, dict(b)]) == [a, b, same_tokens_other_query]
    assert recipe(["distill=embedded"]).distinct is False and recipe(["distill=qwen3-8b"]).distinct is False
    with pytest.raises(Exception, match="distill.distinct"):
        recipe(["distill=smoke", "distill.distinct=maybe"])


def test_a_shared_prefix_is_cut_before_any_labelled_token():
    from ark.distill.sft import shared_prefix

    a = {"input_ids": [1, 2, 3, 4, 5, 6], "labels": [IGNORE] * 4 + [5, 6]}
    b = {"input_ids": [1, 2, 3, 9, 8], "labels": [IGNORE] * 3 + [9, 8]}
    group = shared_prefix([a, b])
    assert group["prefix_ids"] == [1, 2]  # common 3, b's first label at 3: its predicting position 2 stays a suffix's
    assert [s["input_ids"] for s in group["suffixes"]] == [[3, 4, 5, 6], [3, 9, 8]]
    assert [s["labels"] for s in group["suffixes"]] == [[IGNORE, IGNORE, 5, 6], [IGNORE, 9, 8]]
    assert shared_prefix([a, {"input_ids": [7, 2], "labels": [IGNORE, 2]}])["prefix_ids"] == []


@pytest.mark.parametrize("n_items", [None, 50])
def test_a_shared_prefix_batch_has_the_loss_and_gradients_of_the_whole_batch(tokenizer, tmp_path, n_items,
                                                                              monkeypatch):
    """distill.share_prefix: the prefix run once, the suffixes on its keys and values one by one (prefix_sdpa, in
    query blocks of 4 here), gives the loss and LoRA gradients of the same samples run whole in one padded batch
    (LabelledLossTrainer), in training and in validation."""
    import torch

    from ark.distill import attention
    from ark.distill.train import shared_prefix_collator, trainer

    monkeypatch.setattr(attention, "PREFIX_BLOCK", 4)

    gen = torch.Generator().manual_seed(0)
    shared = torch.randint(3, 512, (20,), generator=gen).tolist()
    tails = [torch.randint(3, 512, (n,), generator=gen).tolist() for n in (25, 14, 31)]
    samples = [{"input_ids": shared + t, "labels": [IGNORE] * (20 + k) + t[k:]} for t, k in zip(tails, (4, 2, 9))]
    samples[1]["labels"][24:28] = [IGNORE] * 4  # a gap between two replies
    ts = {}
    for share in (False, True):
        attn = attention.register(attention.PREFIX_SDPA) if share else "sdpa"
        d = recipe(["distill=smoke", f"distill.share_prefix={str(share).lower()}", "distill.batch_size=3",
                    f"distill.attn={attn}"])
        ts[share] = trainer(tiny_qwen3(attn), tokenizer, samples, samples, d, tmp_path / str(share), seed=0)
    with torch.no_grad():  # the same nonzero adapter in both, so that its gradients are not all zero
        for (name, w), (_, w2) in zip(ts[False].model.named_parameters(), ts[True].model.named_parameters()):
            if "lora_B" in name:
                w.normal_(0, 0.02, generator=gen)
                w2.copy_(w)
    results = {}
    for share, t in ts.items():
        batch = t.data_collator([t.train_dataset[i] for i in range(3)])
        assert ("prefix_ids" in batch) == share
        t.create_optimizer_and_scheduler(num_training_steps=1)
        t.current_gradient_accumulation_steps = 1  # what the training loop sets
        t.model.zero_grad()
        loss = t.training_step(t.model, batch, n_items)
        grads = [w.grad.clone() for w in t.model.parameters() if w.requires_grad]
        t.model.eval()
        with torch.no_grad():
            val = t.compute_loss(t.model, t._prepare_inputs(batch), num_items_in_batch=n_items)
        results[share] = (float(loss), grads, float(val))
    assert shared_prefix_collator(samples[:3])["prefix_ids"].shape[1] == 20  # the tails differ at once
    (loss, grads, val), (loss2, grads2, val2) = results[False], results[True]
    assert abs(loss - loss2) < 1e-5 and abs(val - val2) < 1e-5 and loss > 0
    assert all(torch.allclose(g, g2, atol=1e-6, rtol=1e-4) for g, g2 in zip(grads, grads2))
    assert sum(float(g.abs().sum()) for g in grads) > 0
