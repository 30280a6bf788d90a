"""The embedded local chat model: grammar-constrained tool calls, rendering, LoRA adapters, serving.

Fast tests use a tiny randomly initialised Llama with the real SmolLM2 tokenizer (read from the GGUF
once per module): a random model is the worst case for the grammar, since it almost never wants a
valid token. The real SmolLM2 runs only in the ``slow`` tests.
"""
import copy
import os
import hashlib
import json
import threading
import urllib.request

import jsonschema
import pytest
import torch

import ark  # noqa: F401  (offline environment defaults)
from ark.agent.prompt import system_prompt, user_prompt
from ark.llm.decoding import ToolCallGrammar, grammar_schema
from ark.llm.local import PREFILL_CHUNK, LocalChatModel
from ark.llm.protocol import format_tool_call
from ark.llm.server import ChatServer, HTTPError
import ark.llm.weights as weights
from ark.llm.weights import default_gguf_path, fingerprint, gguf_sha256
from ark.tools.toolbox import Toolbox
from tests.helpers import tiny_graph, tiny_index

MESSAGES = [{"role": "system", "content": "You are a retrieval agent."},
            {"role": "user", "content": "Question: which gene is associated with Marfan syndrome?"}]


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
def toolbox():
    g = tiny_graph()
    return Toolbox(g, tiny_index(g))


@pytest.fixture(scope="module")
def tools(toolbox):
    return toolbox.schemas()


@pytest.fixture(scope="module")
def grammar(tokenizer):
    return ToolCallGrammar(tokenizer)


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
def _accepts(grammar, tools, text, only=None) -> bool:
    matcher = grammar.matcher(tools, only)
    ids = grammar.encode(text)
    return matcher.try_consume_tokens(ids) == len(ids) and matcher.is_accepting()


def test_grammar_accepts_exactly_the_schema(grammar, tools):
    ok = [("search_in_graph", {"query": "Marfan syndrome", "size": 30}),
          ("search_in_graph", {"query": 'a "quoted" word'}),
          ("search_in_neighborhood", {"node_index": 5, "node_type": ["disease", "effect/phenotype"],
                                      "edge_type": "is_a"}),
          ("add_to_answer", {"answer_nodes": [{"node_index": 0, "reasoning": "it is"}, {"node_index": 30}]}),
          ("finish", {})]
    for name, args in ok:
        assert _accepts(grammar, tools, format_tool_call(name, args)), (name, args)
    bad = ['{"name": "search_in_graph", "arguments": {"query": "x", "size": 31}}',  # above maximum
           '{"name": "search_in_graph", "arguments": {"query": "x", "size": 0}}',  # below minimum
           '{"name": "search_in_graph", "arguments": {"size": 3}}',  # required query missing
           '{"name": "search_in_graph", "arguments": {"query": ""}}',  # empty string
           '{"name": "search_in_graph", "arguments": {"query": "x", "k": 3}}',  # unknown parameter
           '{"name": "search_in_graph", "arguments": {"size": 3, "query": "x"}}',  # not in schema order
           '{"name": "search_in_graph", "arguments": {"query":"x"}}',  # not json.dumps spacing
           '{"name": "search_in_neighborhood", "arguments": {"node_index": 5, "node_type": "virus"}}',
           '{"name": "add_to_answer", "arguments": {"answer_nodes": []}}',  # minItems 1
           '{"name": "add_to_answer", "arguments": {"answer_nodes": [{"node_index": 1, "why": "x"}]}}',  # extra key
           '{"name": "search_in_graph", "arguments": {"query": "' + "x" * 101 + '"}}',  # default maxLength
           '{"name": "finish", "arguments": {"comment": "x"}} ',  # nothing after the object
           '{"name": "delete_graph", "arguments": {}}']
    for text in bad:
        assert not _accepts(grammar, tools, text), text
    assert _accepts(grammar, tools, '{"name": "finish", "arguments": {}}', only="finish")
    assert not _accepts(grammar, tools, '{"name": "finish", "arguments": {}}', only="search_in_graph")
    with pytest.raises(ValueError, match="not among the tools"):
        grammar.matcher(tools, "nope")


def test_grammar_schema_bounds_strings_and_closes_objects(tools):
    params = tools[0]["function"]["parameters"]
    original = json.dumps(params)
    bounded = grammar_schema(params)
    assert json.dumps(params) == original  # the tool's own schema is untouched
    assert bounded["properties"]["query"] == {**params["properties"]["query"], "minLength": 1, "maxLength": 100}
    items = grammar_schema(tools[2]["function"]["parameters"])["properties"]["answer_nodes"]["items"]
    assert items["additionalProperties"] is False
    kept = grammar_schema({"type": "object", "properties": {"properties": {"type": "string", "maxLength": 5}},
                           "additionalProperties": True})
    assert kept == {"type": "object", "additionalProperties": True,
                    "properties": {"properties": {"type": "string", "maxLength": 5, "minLength": 1}}}


def _closing_after(grammar, tools, prefix, only=None) -> str:
    matcher = grammar.matcher(tools, only)
    ids = grammar.encode(prefix)
    assert matcher.try_consume_tokens(ids) == len(ids)
    closing = grammar.closing(matcher)
    assert matcher.validate_tokens(closing) == len(closing)  # the matcher is left where it was
    matcher.consume_tokens(closing)
    assert matcher.is_accepting()
    return grammar.tokenizer.decode(closing)


def test_closing_completes_the_call_the_short_way(grammar, tools):
    assert _closing_after(grammar, tools, "") == '{"name": "finish", "arguments": {}}'
    assert _closing_after(grammar, tools, '{"name": "search_in_graph", "arguments": {"query": "Mar') == '"}}'
    assert _closing_after(grammar, tools, '{"name": "search_in_graph", "arguments": {"query": "') == 'x"}}'
    assert _closing_after(grammar, tools, '{"name": "search_in_graph", "arguments": {"query": "a", "size": 2') \
        == "}}"
    assert _closing_after(grammar, tools, "", only="add_to_answer") == \
        '{"name": "add_to_answer", "arguments": {"answer_nodes": [{"node_index": 0}]}}'
    assert _closing_after(grammar, tools, '{"name": "search_in_neighborhood", "arguments": {"node_index": 1, '
                                          '"node_type": ["gene/protein", "') == 'disease"]}}'


# ---------------------------------------------------------------- constrained decoding
@pytest.mark.e2e  # 30 decodes
def test_constrained_calls_are_valid_for_30_seeds(local, tools):
    names = set()
    for seed in range(30):
        max_tokens = 30 + 5 * seed
        reply = local.generate({"messages": MESSAGES, "tools": tools, "tool_choice": "auto", "temperature": 1.0,
                                "seed": seed, "max_tokens": max_tokens})
        name, _ = _check_call(reply, tools, max_tokens)
        names.add(name)
    assert len(names) >= 3  # the choices are really sampled


@pytest.mark.e2e
def test_calls_are_valid_under_other_schema_features(local):
    params = {"type": "object", "required": ["n", "flag", "ids", "kind", "inner"], "properties": {
        "n": {"type": "number"}, "flag": {"type": "boolean"}, "note": {"type": ["string", "null"]},
        "ids": {"type": "array", "items": {"type": "integer", "minimum": 100, "maximum": 200}, "minItems": 2,
                "maxItems": 3},
        "kind": {"enum": ["a", 1, None]},
        "inner": {"type": "object", "properties": {"k": {"type": "string", "maxLength": 3}}, "required": ["k"]}}}
    tools = [{"type": "function", "function": {"name": "varied", "parameters": params}}]
    shortest = '{"name": "varied", "arguments": {"n": 0, "flag": true, "ids": [100, 100], "kind": "a", ' \
               '"inner": {"k": "x"}}}'
    budget = len(local.encode(shortest))
    for seed in range(10):
        for max_tokens in (budget, budget + 20, 120):
            reply = local.generate({"messages": MESSAGES, "tools": tools, "seed": seed, "max_tokens": max_tokens})
            _check_call(reply, tools, max_tokens)
    reply = local.generate({"messages": MESSAGES, "tools": tools, "max_tokens": 1})
    assert json.loads(reply["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"]) == \
        json.loads(shortest)["arguments"]


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
    first = [local.generate({**req, "seed": s})["choices"][0]["message"]["tool_calls"][0] for s in (1, 2)]
    again = [local.generate({**req, "seed": s})["choices"][0]["message"]["tool_calls"][0] for s in (1, 2)]
    assert first == again  # ids included: of the prompt and reply, not of how many calls came before
    if first[0]["function"] != first[1]["function"]:
        assert first[0]["id"] != first[1]["id"]
    other = local.generate({**req, "seed": 1, "messages": MESSAGES + [{"role": "user", "content": "And again?"}]})
    assert other["choices"][0]["message"]["tool_calls"][0]["id"] != first[0]["id"]  # another prompt, another id
    greedy = [local.generate({**req, "temperature": 0, "seed": s})["choices"][0]["message"]["tool_calls"]
              for s in (1, 2)]
    assert greedy[0][0]["function"] == greedy[1][0]["function"]


def test_tiny_budget_still_gives_a_complete_call(local, tools):
    shortest = len(local.encode('{"name": "finish", "arguments": {}}'))
    for max_tokens in (1, shortest - 1):  # less than the shortest call: that call, over budget
        reply = local.generate({"messages": MESSAGES, "tools": tools, "seed": 3, "max_tokens": max_tokens})
        assert _check_call(reply, tools) == ("finish", {})
        assert reply["usage"]["completion_tokens"] == shortest
    for seed in range(5):
        reply = local.generate({"messages": MESSAGES, "tools": tools, "seed": seed, "max_tokens": shortest})
        assert _check_call(reply, tools, shortest) == ("finish", {})
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
def test_rendering_is_chatml_with_observations(local, tools):
    call = {"id": "c7", "type": "function",
            "function": {"name": "search_in_graph", "arguments": '{"query": "Marfan", "size": 3}'}}
    messages = MESSAGES + [{"role": "assistant", "content": None, "tool_calls": [call]},
                           {"role": "tool", "tool_call_id": "c7", "content": "Top 1 nodes: [0] Marfan syndrome"}]
    prompt = local.render({"messages": messages, "tools": tools,
                           "tool_choice": {"type": "function", "function": {"name": "finish"}}})
    assert prompt.startswith("<|im_start|>system\nYou are a retrieval agent.")
    assert "Call the tool finish now." in prompt and prompt.endswith("<|im_start|>assistant\n")
    assert "<|im_start|>user\nObservation from search_in_graph:" in prompt
    assert "SmolLM" not in local.render({"messages": MESSAGES[1:], "tools": tools})  # tool block replaces persona


def test_local_model_reads_each_tool_description_once(local, toolbox):
    """The agent's native-mode prompt leaves the tools to the backbone; the local model lists them once."""
    tools = toolbox.schemas()
    messages = [{"role": "system", "content": system_prompt(toolbox, 5)},
                {"role": "user", "content": user_prompt("Which gene is associated with Marfan syndrome?")}]
    prompt = local.render({"messages": messages, "tools": tools, "tool_choice": "auto"})
    for t in tools:
        f = t["function"]
        assert prompt.count(f["description"]) == 1, f["name"]
        assert prompt.count(f"- {f['name']}: ") == 1, f["name"]
        for p in f["parameters"]["properties"].values():
            if p.get("description"):
                assert prompt.count(p["description"]) == 1, p["description"]
    assert prompt.count("You are a retrieval agent.") == 1


# ---------------------------------------------------------------- LoRA
@pytest.mark.e2e  # a LoRA adapter trained and loaded
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
    assert merged.identity == {"gguf_sha256": None, "adapter_sha256": fingerprint(None, tmp_path)["adapter_sha256"],
                               "dtype": "float32", "constrained": True, "prefill_chunk": PREFILL_CHUNK,
                               "threads": torch.get_num_threads(), "decode_rows": 1, "linear": "torch",
                               "prefill": "padded to the chunk", "tool_call_ids": "of the prompt and reply"}
    # oneDNN's reordered weights: the same model to the last bits' noise; an unmerged adapter keeps torch's layers
    packed = LocalChatModel.from_model(copy.deepcopy(tiny), tokenizer, adapter=tmp_path, linear="onednn")
    kept = LocalChatModel.from_model(copy.deepcopy(tiny), tokenizer, adapter=tmp_path, merge_adapter=False,
                                     linear="onednn")
    assert (packed.identity["linear"], kept.identity["linear"]) == ("onednn", "torch")
    assert not any(type(m) is torch.nn.Linear for m in packed.model.modules())
    with torch.inference_mode():
        assert torch.allclose(packed.model(ids).logits, lm, atol=1e-4)
    with pytest.raises(ValueError, match="linear must be onednn or torch, not 'mkl'"):
        LocalChatModel.from_model(copy.deepcopy(tiny), tokenizer, linear="mkl")
    reply = merged.generate({"messages": MESSAGES, "tools": [{"type": "function", "function": {
        "name": "f", "parameters": {"type": "object", "properties": {"x": {"type": "integer"}}}}}],
        "max_tokens": 20})
    assert reply["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "f"


# ---------------------------------------------------------------- fingerprint
def test_fingerprint_changes_with_the_adapter_files(tmp_path):
    adapter = tmp_path / "adapter"
    (adapter / "sub").mkdir(parents=True)
    (adapter / "adapter_config.json").write_text('{"r": 4}')
    (adapter / "sub" / "weights.bin").write_bytes(b"\x00" * 10)
    first = fingerprint(None, adapter)["adapter_sha256"]
    assert fingerprint(None, adapter)["adapter_sha256"] == first and len(first) == 64
    (adapter / "sub" / "weights.bin").write_bytes(b"\x00" * 9 + b"\x01")
    changed = fingerprint(None, adapter)["adapter_sha256"]
    (adapter / "sub" / "weights.bin").rename(adapter / "weights.bin")  # same bytes, other place
    moved = fingerprint(None, adapter)["adapter_sha256"]
    assert len({first, changed, moved}) == 3
    assert fingerprint(None, None) == {"gguf_sha256": None, "adapter_sha256": None}
    with pytest.raises(FileNotFoundError):
        fingerprint(None, tmp_path / "missing")


def test_gguf_hash_is_kept_in_a_sidecar_until_the_file_changes(tmp_path):
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF" + b"\x00" * 100)
    cache = tmp_path / "cache"
    digest = hashlib.sha256(gguf.read_bytes()).hexdigest()
    assert fingerprint(gguf, None, cache) == {"gguf_sha256": digest, "adapter_sha256": None}
    sidecar = cache / "m.gguf.sha256.json"
    sidecar.write_text(sidecar.read_text().replace(digest, "remembered"))
    assert gguf_sha256(gguf, cache) == "remembered"  # read from the sidecar, not hashed again
    gguf.write_bytes(b"GGUF" + b"\x01" * 100)  # new size: hashed again
    assert gguf_sha256(gguf, cache) == hashlib.sha256(gguf.read_bytes()).hexdigest()
    assert gguf_sha256(gguf) == gguf_sha256(gguf, cache)  # without a cache dir: the sidecar is beside the file
    assert (tmp_path / "m.gguf.sha256.json").exists()


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
    assert model.identity == cached.identity == {"gguf_sha256": gguf_sha256(default_gguf_path(), tmp_path / "models"),
                                                 "adapter_sha256": None, "dtype": "bfloat16", "constrained": True,
                                                 "prefill_chunk": PREFILL_CHUNK, "threads": torch.get_num_threads(),
                                                 "decode_rows": 1, "linear": model.identity["linear"],
                                                 "prefill": "padded to the chunk",
                                                 "tool_call_ids": "of the prompt and reply"}
    assert model.identity["linear"] == ("onednn" if weights.cpu_has_bf16() else "torch")  # no bf16 oneDNN without
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


def test_importing_ark_shortens_openmp_spinning_unless_the_user_set_it():
    import subprocess
    import sys

    code = "import ark, os; print(os.environ['GOMP_SPINCOUNT'])"
    env = {k: v for k, v in os.environ.items() if k != "GOMP_SPINCOUNT"}
    assert subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          check=True).stdout.strip() == "10000"
    assert subprocess.run([sys.executable, "-c", code], env={**env, "GOMP_SPINCOUNT": "500"}, capture_output=True,
                          text=True, check=True).stdout.strip() == "500"
