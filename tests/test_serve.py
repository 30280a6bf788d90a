"""``ark serve``: the embedded model's server kept up, reached with the official ``openai`` client.

The model is a tiny random Llama with SmolLM2's tokenizer (a test double standing in for the 135M weights, so the
test is quick); the server, the routes, the request handling and the tool-call decoding are the product's."""
import threading

import pytest
import torch

from ark.cli import main
from ark.llm.local import LocalChatModel
from ark.serve import serve
from tests.helpers import tiny_graph, tiny_index

MESSAGES = [{"role": "system", "content": "You are a retrieval agent."},
            {"role": "user", "content": "Question: which gene is associated with Marfan syndrome?"}]


@pytest.fixture
def tiny_local(tokenizer):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, intermediate_size=128)
    return LocalChatModel.from_model(LlamaForCausalLM(config).eval(), tokenizer)


def test_a_student_is_served_to_the_openai_client_under_its_own_name(tiny_local, monkeypatch, tmp_path):
    from openai import OpenAI

    from ark.tools.toolbox import Toolbox

    built = {}
    monkeypatch.setattr("ark.llm.local.LocalChatModel", lambda **kw: built.update(kw) or tiny_local)
    adapter = tmp_path / "my-student"
    adapter.mkdir()
    ready, stop = {}, threading.Event()
    server = threading.Thread(target=serve, args=(["backbone=student", f"backbone.local.adapter={adapter}",
                                                   f"paths.root={tmp_path}"], "127.0.0.1", 0),
                              kwargs={"ready": lambda url, name: ready.update(url=url, name=name), "stop": stop})
    server.start()
    try:
        for _ in range(600):
            if ready or not server.is_alive():
                break
            threading.Event().wait(0.05)
        assert ready["name"] == "smollm2-my-student"
        assert built["adapter"] == str(adapter) and built["constrained"] is False  # the student's own settings
        assert built["decode_rows"] == 24  # a row for each request of a default run: 3 agents x 8 queries in flight
        client = OpenAI(base_url=ready["url"], api_key="none", max_retries=0, timeout=60)
        assert [m.id for m in client.models.list().data] == ["smollm2-my-student"]
        tools = Toolbox(tiny_graph(), tiny_index(tiny_graph())).schemas()
        reply = client.chat.completions.create(model="smollm2-my-student", messages=MESSAGES, max_tokens=30, seed=1,
                                               tools=tools)
        assert reply.model == "smollm2-my-student" and reply.choices[0].message.role == "assistant"
        assert reply.usage.prompt_tokens > 0 and reply.usage.completion_tokens > 0
    finally:
        stop.set()
        server.join(timeout=30)
    assert not server.is_alive()


def test_a_model_it_cannot_serve_is_one_line(capsys, tmp_path):
    assert main(["serve", "backbone=rules", f"paths.root={tmp_path}"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ark serve serves the embedded model or a student") and len(err.splitlines()) == 1
    assert main(["serve", "backbone=student", f"backbone.local.adapter={tmp_path}/none"]) == 2
    assert "no adapter directory" in capsys.readouterr().err


def test_a_given_decode_rows_is_kept_and_the_default_follows_the_run_defaults():
    from ark.serve import served_config

    assert served_config([]).backbone.local.decode_rows == 24
    assert served_config(["agent.n_agents=1", "eval.concurrency=4"]).backbone.local.decode_rows == 4
    assert served_config(["backbone.local.decode_rows=2"]).backbone.local.decode_rows == 2
