"""The embedded local chat model: grammar-constrained tool calls, rendering, LoRA adapters, serving.

Fast tests use a tiny randomly initialised Llama with the real SmolLM2 tokenizer (read from the GGUF
once per module): a random model is the worst case for the grammar, since it almost never wants a
valid token. The real SmolLM2 runs only in the ``slow`` tests.
"""
import copy
import json
import threading
import urllib.request

import jsonschema
import pytest
import torch

import ark  # noqa: F401  (offline environment defaults)
from ark.llm.local import (
    LocalChatModel,
    ToolCallGrammar,
    _int_completion,
    chat_messages,
    default_gguf_path,
    format_tool_call,
)
from ark.llm.server import ChatServer, HTTPError
from ark.tools.toolbox import Toolbox
from tests.helpers import tiny_graph, tiny_index

MESSAGES = [{"role": "system", "content": "You are a retrieval agent."},
            {"role": "user", "content": "Question: which gene is associated with Marfan syndrome?"}]


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import AutoTokenizer

    try:
        path = default_gguf_path()
    except FileNotFoundError as e:
        pytest.skip(str(e))
    return AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)


@pytest.fixture(scope="module")
def tiny(tokenizer):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, intermediate_size=128)
    return LlamaForCausalLM(config).eval()


@pytest.fixture(scope="module")
def local(tiny, tokenizer):
    return LocalChatModel.from_model(tiny, tokenizer)


@pytest.fixture(scope="module")
def tools():
    g = tiny_graph()
    return Toolbox(g, tiny_index(g)).schemas()


def _schemas(tools):
    return {t["function"]["name"]: t["function"]["parameters"] for t in tools}


def _strings(value):
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)


def _check_call(reply, tools, max_tokens=None) -> tuple[str, dict]:
    choice = reply["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    message = choice["message"]
    assert message["content"] is None and len(message["tool_calls"]) == 1
    call = message["tool_calls"][0]
    assert call["type"] == "function" and call["id"].startswith("call_")
    name, args = call["function"]["name"], json.loads(call["function"]["arguments"])
    schemas = _schemas(tools)
    assert name in schemas
    jsonschema.validate(args, schemas[name])  # types, enums, minimum/maximum, minItems, no extra keys
    assert all(0 < len(s) <= 100 for s in _strings(args))  # default maxLength; no empty strings
    if max_tokens is not None:
        assert reply["usage"]["completion_tokens"] <= max_tokens
    return name, args


# ---------------------------------------------------------------- grammar
def test_grammar_accepts_exactly_the_schema(tools):
    g = ToolCallGrammar(tools)
    ok = [("search_in_graph", {"query": "Marfan syndrome", "size": 30}),
          ("search_in_neighborhood", {"node_index": 5, "node_type": ["disease", "effect/phenotype"],
                                      "edge_type": "is_a"}),
          ("add_to_answer", {"answer_nodes": [{"node_index": 0, "reasoning": "it is"}, {"node_index": 30}]}),
          ("finish", {})]
    for name, args in ok:
        state = g.advance(g.start(), format_tool_call(name, args))
        assert state is not None and g.finished(state), (name, args)
    bad = ['{"name": "search_in_graph", "arguments": {"query": "x", "size": 31}}',  # above maximum
           '{"name": "search_in_graph", "arguments": {"query": "x", "size": 0}}',  # below minimum
           '{"name": "search_in_graph", "arguments": {"size": 3}}',  # required query missing
           '{"name": "search_in_graph", "arguments": {"query": ""}}',  # empty string
           '{"name": "search_in_graph", "arguments": {"query": "a\\"b"}}',  # escapes are not generated
           '{"name": "search_in_graph", "arguments": {"query": "x", "k": 3}}',  # unknown parameter
           '{"name": "search_in_neighborhood", "arguments": {"node_index": 5, "node_type": "virus"}}',
           '{"name": "add_to_answer", "arguments": {"answer_nodes": []}}',  # minItems 1
           '{"name": "search_in_graph", "arguments": {"query": "' + "x" * 101 + '"}}',  # default maxLength
           '{"name": "finish", "arguments": {"comment": "x"}} ',  # nothing after the object
           '{"name": "delete_graph", "arguments": {}}']
    for text in bad:
        state = g.advance(g.start(), text)
        assert state is None or not g.finished(state), text


def test_grammar_forces_literals_and_closes_shortest(tools):
    g = ToolCallGrammar(tools)
    forced, state = g.forced(g.start())
    assert forced == '{"name": "'  # then the tool name is a choice
    forced, state = g.forced(g.advance(state, "search_in_g"))
    assert forced == 'raph", "arguments": {"query": "'
    assert g.closing(state) == 'x"}}'
    only = ToolCallGrammar(tools, only="add_to_answer")
    forced, state = only.forced(only.start())
    assert forced == '{"name": "add_to_answer", "arguments": {"answer_nodes": [{"node_index": '
    assert only.closing(state) == '0}]}}'


def test_integer_completion_respects_bounds():
    assert _int_completion("", 1, 30) == "1"
    assert _int_completion("3", 1, 30) == "3" and _int_completion("4", 10, 30) is None
    assert _int_completion("31", 1, 30) is None and _int_completion("0", 1, 30) is None
    assert _int_completion("05", 0, 99) is None and _int_completion("1", 10, 19) == "10"
    assert _int_completion("-", -5, 5) == "-1" and _int_completion("-", 0, 5) is None
    assert _int_completion("", -9, -3) == "-3"


# ---------------------------------------------------------------- constrained decoding
def test_constrained_calls_are_valid_for_30_seeds(local, tools):
    names = set()
    for seed in range(30):
        max_tokens = 30 + 5 * seed
        reply = local.generate({"messages": MESSAGES, "tools": tools, "tool_choice": "auto", "temperature": 1.0,
                                "seed": seed, "max_tokens": max_tokens})
        name, _ = _check_call(reply, tools, max_tokens)
        names.add(name)
    assert len(names) >= 3  # the choices are really sampled


def test_tool_choice_forces_the_function(local, tools):
    for i, name in enumerate(_schemas(tools)):
        reply = local.generate({"messages": MESSAGES, "tools": tools, "temperature": 1.0, "seed": i, "max_tokens": 80,
                                "tool_choice": {"type": "function", "function": {"name": name}}})
        assert _check_call(reply, tools, 80)[0] == name
    with pytest.raises(HTTPError):
        local.generate({"messages": MESSAGES, "tools": tools,
                        "tool_choice": {"type": "function", "function": {"name": "nope"}}})


def test_seeded_replies_are_deterministic(local, tools):
    req = {"messages": MESSAGES, "tools": tools, "temperature": 1.0, "top_p": 0.9, "max_tokens": 60}
    first = [local.generate({**req, "seed": s})["choices"][0]["message"]["tool_calls"][0]["function"] for s in (1, 2)]
    again = [local.generate({**req, "seed": s})["choices"][0]["message"]["tool_calls"][0]["function"] for s in (1, 2)]
    assert first == again
    greedy = [local.generate({**req, "temperature": 0, "seed": s})["choices"][0]["message"]["tool_calls"]
              for s in (1, 2)]
    assert greedy[0][0]["function"] == greedy[1][0]["function"]


def test_tiny_budget_still_gives_a_complete_call(local, tools):
    for max_tokens in (1, 14):  # less than the shortest call: that call, over budget
        reply = local.generate({"messages": MESSAGES, "tools": tools, "seed": 3, "max_tokens": max_tokens})
        _check_call(reply, tools)
    search = {"type": "function", "function": {"name": "search_in_graph"}}
    for max_tokens in range(20, 33, 3):  # the random model's query would run on: closed in time
        reply = local.generate({"messages": MESSAGES, "tools": tools, "tool_choice": search, "seed": max_tokens,
                                "max_tokens": max_tokens})
        _check_call(reply, tools, max_tokens)
        assert reply["usage"]["completion_tokens"] >= max_tokens - 4


def test_unconstrained_mode_returns_text(tiny, tokenizer, tools, local):
    free = LocalChatModel.from_model(tiny, tokenizer, constrained=False)
    reply = free.generate({"messages": MESSAGES, "tools": tools, "seed": 0, "max_tokens": 12})
    choice = reply["choices"][0]
    assert isinstance(choice["message"]["content"], str) and "tool_calls" not in choice["message"]
    assert choice["finish_reason"] in ("stop", "length") and reply["usage"]["completion_tokens"] <= 12
    # without tools (or with tool_choice "none") the constrained model answers in text too
    for req in ({"messages": MESSAGES}, {"messages": MESSAGES, "tools": tools, "tool_choice": "none"}):
        reply = local.generate({**req, "seed": 0, "max_tokens": 5})
        assert isinstance(reply["choices"][0]["message"]["content"], str)


# ---------------------------------------------------------------- rendering
def test_rendering_lists_tools_and_turns_results_into_observations(local, tools):
    call = {"id": "c7", "type": "function",
            "function": {"name": "search_in_graph", "arguments": '{"query": "Marfan", "size": 3}'}}
    messages = MESSAGES + [{"role": "assistant", "content": None, "tool_calls": [call]},
                           {"role": "tool", "tool_call_id": "c7", "content": "Top 1 nodes: [0] Marfan syndrome"}]
    turns = chat_messages(messages, tools)
    assert [t["role"] for t in turns] == ["system", "user", "assistant", "user"]
    system = turns[0]["content"]
    assert system.startswith("You are a retrieval agent.")
    for t in tools:
        assert f"- {t['function']['name']}: {t['function']['description']}" in system
    assert "size (integer from 1 to 30; optional)" in system and '{"name": <tool name>' in system
    assert turns[2]["content"] == '{"name": "search_in_graph", "arguments": {"query": "Marfan", "size": 3}}'
    assert turns[3]["content"] == "Observation from search_in_graph:\nTop 1 nodes: [0] Marfan syndrome"
    prompt = local.render({"messages": messages, "tools": tools,
                           "tool_choice": {"type": "function", "function": {"name": "finish"}}})
    assert prompt.startswith("<|im_start|>system\nYou are a retrieval agent.")
    assert "Call the tool finish now." in prompt and prompt.endswith("<|im_start|>assistant\n")
    assert "<|im_start|>user\nObservation from search_in_graph:" in prompt
    assert "SmolLM" not in local.render({"messages": MESSAGES[1:], "tools": tools})  # tool block replaces persona


# ---------------------------------------------------------------- LoRA
def test_lora_adapter_loads_and_changes_logits(tiny, tokenizer, tmp_path):
    from peft import LoraConfig, get_peft_model

    peft_model = get_peft_model(copy.deepcopy(tiny), LoraConfig(r=4, lora_alpha=8,
                                                                target_modules=["q_proj", "v_proj"]))
    with torch.no_grad():
        for n, p in peft_model.named_parameters():
            if "lora_B" in n:  # zero at init: make the adapter do something
                p.normal_(0, 0.5)
    peft_model.save_pretrained(tmp_path)
    ids = torch.tensor([tokenizer.encode("Hello, which gene?")])
    merged = LocalChatModel.from_model(copy.deepcopy(tiny), tokenizer, adapter=tmp_path)
    unmerged = LocalChatModel.from_model(copy.deepcopy(tiny), tokenizer, adapter=tmp_path, merge_adapter=False)
    with torch.inference_mode():
        base = tiny(ids).logits
        lm, lu = merged.model(ids).logits, unmerged.model(ids).logits
    assert not torch.allclose(base, lm, atol=1e-3)
    assert torch.allclose(lm, lu, atol=1e-4)
    reply = merged.generate({"messages": MESSAGES, "tools": [{"type": "function", "function": {
        "name": "f", "parameters": {"type": "object", "properties": {"x": {"type": "integer"}}}}}],
        "max_tokens": 20})
    assert reply["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "f"


# ---------------------------------------------------------------- serving
def test_served_over_http_one_request_at_a_time(local, tools):
    body = json.dumps({"model": "tiny", "messages": MESSAGES, "tools": tools, "seed": 4, "max_tokens": 40}).encode()
    replies = []
    with ChatServer(local.generate) as server:
        def post():
            req = urllib.request.Request(server.url + "/chat/completions", body, {"Content-Type": "application/json"})
            with urllib.request.urlopen(req, timeout=60) as r:
                replies.append(json.load(r))

        threads = [threading.Thread(target=post) for _ in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert len(replies) == 3
    calls = [_check_call(r, tools, 40) for r in replies]
    assert calls[0] == calls[1] == calls[2]  # same seed, no interference between concurrent requests
    too_long = {"messages": [{"role": "user", "content": "word " * 3000}]}
    with pytest.raises(HTTPError, match="context window"):
        local.generate(too_long)


# ---------------------------------------------------------------- the real SmolLM2
@pytest.mark.slow
def test_smollm2_through_chat_server_and_litellm(tools, tmp_path):
    import litellm

    model = LocalChatModel(dtype="bfloat16", cache_dir=tmp_path / "models")
    cached = LocalChatModel(dtype="bfloat16", cache_dir=tmp_path / "models")  # loads the converted checkpoint
    ids = torch.tensor([model.encode(model.render({"messages": MESSAGES, "tools": tools}))])
    with torch.inference_mode():
        assert torch.equal(model.model(ids).logits, cached.model(ids).logits)
    del cached
    with ChatServer(model.generate, model_name="smollm2") as server:
        for seed in range(3):
            resp = litellm.completion(model="openai/smollm2", api_base=server.url, api_key="none",
                                      messages=MESSAGES, tools=tools, tool_choice="auto", temperature=0.7,
                                      seed=seed, max_tokens=100)
            call = resp.choices[0].message.tool_calls[0]
            assert call.function.name in _schemas(tools)
            jsonschema.validate(json.loads(call.function.arguments), _schemas(tools)[call.function.name])
            assert resp.usage.completion_tokens <= 100 and resp.usage.prompt_tokens > 100
