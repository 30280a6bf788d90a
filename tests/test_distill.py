"""SFT data from teacher trajectories: assistant-only labels, the inference rendering, nothing label-derived."""
import json
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


def tools_of(cfg):
    from ark import build

    return build.toolbox(cfg).schemas()


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


def test_smoke_lora_training_on_cpu_saves_an_adapter_the_local_model_loads(rules_run, tokenizer, tmp_path):
    """distill=smoke: a few LoRA steps of a tiny random model on the teacher's samples, on CPU."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from ark.distill.train import train_lora
    from ark.llm.weights import apply_adapter, fingerprint

    cfg, run_dir, _ = rules_run
    samples = list(sft_samples(load_run(run_dir)[1], tools_of(cfg), tokenizer))
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                         num_key_value_heads=1, intermediate_size=64, max_position_embeddings=4096)
    d = compose_cfg(["distill=smoke"]).distill
    report = train_lora(LlamaForCausalLM(config), tokenizer, samples[:4], samples[4:], d, tmp_path / "adapter")
    assert report["steps"] == 3 and report["best_eval_loss"] is not None and report["train_samples"] == 4
    assert (tmp_path / "adapter" / "adapter_config.json").exists()
    curve = json.loads((tmp_path / "adapter" / "curve.json").read_text())
    assert any("loss" in row for row in curve) and any("eval_loss" in row for row in curve)
    assert fingerprint(None, tmp_path / "adapter")["adapter_sha256"]
    torch.manual_seed(0)
    base = LlamaForCausalLM(config).eval()
    ids = torch.tensor([samples[0]["input_ids"][:16]])
    before = base(ids).logits
    after = apply_adapter(base, tmp_path / "adapter")(ids).logits
    assert not torch.allclose(before, after)  # the adapter learned something and loads on the base


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
    assert report["teacher"]["backbone"]["name"] == "rules" and "answer_ids" not in json.dumps(report)
    student = compose_cfg(["backbone=student", f"backbone.local.adapter={out}"]).backbone
    assert student.name == "student" and not student.local.constrained and student.kind == "local"

