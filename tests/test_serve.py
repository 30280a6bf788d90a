"""``ark serve``: the embedded model's server kept up, reached with the official ``openai`` client.

The model is a tiny random Llama with SmolLM2's tokenizer (a test double standing in for the 135M weights, so the
test is quick); the server, the routes, the request handling and the tool-call decoding are the product's."""
import contextlib
import json
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


class ScriptedModel:
    """A test double for the served model: every reply calls ``search`` with the last message's text."""

    def generate(self, request: dict) -> dict:
        from ark.llm.server import chat_completion

        call = {"id": "call_1", "type": "function",
                "function": {"name": "search", "arguments": json.dumps({"query": request["messages"][-1]["content"]})}}
        return chat_completion(request.get("model") or "smollm2", {"role": "assistant", "content": None,
                                                               "tool_calls": [call]}, "tool_calls", 7, 5)

    def check_size(self, body: dict) -> dict:
        return body

    def cancel(self) -> None:
        pass


@contextlib.contextmanager
def served(model, monkeypatch, tmp_path, *overrides):
    """``ark serve overrides`` in a thread with ``model`` standing in for the embedded one: (its URL, its name,
    the settings the model was built with); the server has stopped when the block ends."""
    built = {}
    monkeypatch.setattr("ark.llm.local.LocalChatModel", lambda **kw: built.update(kw) or model)
    ready, stop = {}, threading.Event()
    thread = threading.Thread(target=serve, args=([*overrides, f"paths.root={tmp_path}"], "127.0.0.1", 0),
                              kwargs={"ready": lambda url, name: ready.update(url=url, name=name), "stop": stop})
    thread.start()
    try:
        for _ in range(600):
            if ready or not thread.is_alive():
                break
            threading.Event().wait(0.05)
        yield ready["url"], ready["name"], built
    finally:
        stop.set()
        thread.join(timeout=30)
    assert not thread.is_alive()


@pytest.mark.e2e  # serving through the openai client
def test_the_openai_client_streams_replies_with_and_without_tool_calls(tiny_local, monkeypatch, tmp_path, capfd):
    from openai import OpenAI

    with served(tiny_local, monkeypatch, tmp_path) as (url, name, _):
        client = OpenAI(base_url=url, api_key="none", max_retries=0, timeout=60)
        whole = client.chat.completions.create(model=name, messages=MESSAGES, max_tokens=12, seed=3)
        events = list(client.chat.completions.create(model=name, messages=MESSAGES, max_tokens=12, seed=3,
                                                     stream=True, stream_options={"include_usage": True}))
    assert "".join(e.choices[0].delta.content or "" for e in events if e.choices) == whole.choices[0].message.content
    assert [e.choices[0].finish_reason for e in events if e.choices][-1] == whole.choices[0].finish_reason
    assert events[-1].usage.completion_tokens == whole.usage.completion_tokens  # asked for with include_usage
    assert not events[-1].choices and all(e.usage is None for e in events[:-1])  # null before, as OpenAI sends it
    log = capfd.readouterr().err.splitlines()
    assert any(line.endswith(" ms") and "POST /v1/chat/completions 200" in line and "tokens streamed" in line
               for line in log), log

    with served(ScriptedModel(), monkeypatch, tmp_path) as (url, name, _):
        client = OpenAI(base_url=url, api_key="none", max_retries=0, timeout=60)
        events = list(client.chat.completions.create(model=name, messages=MESSAGES, stream=True,
                                                     tools=[{"type": "function", "function": {"name": "search"}}]))
    calls = [call for e in events for call in e.choices[0].delta.tool_calls or []]
    assert [(c.index, c.function.name, json.loads(c.function.arguments)) for c in calls] == [
        (0, "search", {"query": MESSAGES[-1]["content"]})]
    assert events[-1].choices[0].finish_reason == "tool_calls" and events[-1].usage is None  # not asked for
    assert events[0].choices[0].delta.role == "assistant" and events[0].choices[0].delta.content is None


@pytest.mark.parametrize("body, status", [({"stream": "yes"}, 400), ({"stream_options": {"include_usage": 2}}, 400),
                                          ({"stream_options": {"include_usage": True}}, 400),  # without stream
                                          ({"stream": None}, 200)])
def test_stream_settings_are_validated_and_legacy_completions_are_refused(body, status, monkeypatch, tmp_path, capfd):
    import httpx

    with served(ScriptedModel(), monkeypatch, tmp_path) as (url, name, _):
        reply = httpx.post(f"{url}/chat/completions", json={"messages": MESSAGES, **body}, timeout=30)
        legacy = httpx.post(f"{url}/completions", json={"model": name, "prompt": "Hello"}, timeout=30)
        httpx.get(f"{url}/%0A12:00:00 POST /v1/forged 200%1B[2J", timeout=30)
    assert reply.status_code == status, reply.text
    assert status == 200 or reply.json()["error"]["type"] == "invalid_request_error"
    assert legacy.status_code == 404 and "/v1/chat/completions" in legacy.json()["error"]["message"]
    log = capfd.readouterr().err
    assert "\x1b" not in log and not any(line.startswith("12:00:00 POST /v1/forged") for line in log.splitlines())
    assert "/v1/\\n12:00:00 POST /v1/forged 200\\u001b[2J 404" in log  # one line, its controls escaped


def test_a_reply_that_cannot_be_streamed_is_a_500_and_logged_as_one(monkeypatch, tmp_path, capfd):
    import httpx

    broken = ScriptedModel()
    broken.generate = lambda request: {"object": "chat.completion", "choices": []}  # a generator's bug
    with served(broken, monkeypatch, tmp_path) as (url, name, _):
        reply = httpx.post(f"{url}/chat/completions", json={"messages": MESSAGES, "stream": True}, timeout=30)
    assert reply.status_code == 500 and reply.json()["error"]["type"] == "server_error", reply.text
    assert "POST /v1/chat/completions 500" in capfd.readouterr().err


def test_a_student_is_served_to_the_openai_client_under_its_own_name(tiny_local, monkeypatch, tmp_path):
    from openai import OpenAI

    from ark.tools.toolbox import Toolbox

    adapter = tmp_path / "my-student"
    adapter.mkdir()
    with served(tiny_local, monkeypatch, tmp_path, "backbone=student", f"backbone.local.adapter={adapter}") as (
            url, name, built):
        assert name == "smollm2-my-student"
        assert built["adapter"] == str(adapter) and built["constrained"] is False  # the student's own settings
        assert built["decode_rows"] == 8  # SERVE_ROWS
        client = OpenAI(base_url=url, api_key="none", max_retries=0, timeout=60)
        assert [m.id for m in client.models.list().data] == ["smollm2-my-student"]
        tools = Toolbox(tiny_graph(), tiny_index(tiny_graph())).schemas()
        reply = client.chat.completions.create(model="smollm2-my-student", messages=MESSAGES, max_tokens=30, seed=1,
                                               tools=tools)
        assert reply.model == "smollm2-my-student" and reply.choices[0].message.role == "assistant"
        assert reply.usage.prompt_tokens > 0 and reply.usage.completion_tokens > 0


def test_a_model_it_cannot_serve_is_one_line(capsys, tmp_path):
    assert main(["serve", "backbone=rules", f"paths.root={tmp_path}"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ark serve serves the embedded model or a student") and len(err.splitlines()) == 1
    assert main(["serve", "backbone=student", f"backbone.local.adapter={tmp_path}/none"]) == 2
    assert "no adapter directory" in capsys.readouterr().err


def test_messages_longer_than_the_window_can_take_are_refused_before_tokenizing(tiny_local, monkeypatch):
    """The character bound (the context window times the longest token): a prompt past it is a 400 at once, its text
    never tokenized; one within it goes on to the tokenizer."""
    from ark.llm.schema import RequestError

    monkeypatch.setattr(tiny_local, "encode", lambda text: pytest.fail("the prompt was tokenized"))
    limit = tiny_local.max_prompt_chars
    assert limit >= tiny_local.context_window
    over = {"messages": [{"role": "system", "content": "a" * (limit // 2)},
                         {"role": "user", "content": [{"type": "text", "text": "b" * (limit - limit // 2 + 1)}]}]}
    with pytest.raises(RequestError, match="more than the context window"):
        tiny_local.generate(over)
    assert tiny_local.check_size({"messages": [{"role": "user", "content": "a" * limit}]})


@pytest.mark.parametrize("port", ["99999", "-1", "http"])
def test_a_port_out_of_range_is_refused_by_the_argument_parser(port, capsys):
    with pytest.raises(SystemExit) as exited:
        main(["serve", "--port", port])
    assert exited.value.code == 2 and "is not a TCP port" in capsys.readouterr().err


def test_a_port_in_use_is_one_line_before_the_model_loads(capsys, tmp_path, monkeypatch):
    import socket

    monkeypatch.setattr("ark.llm.local.LocalChatModel", lambda **kw: pytest.fail("the model was loaded"))
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        assert main(["serve", "--port", str(port), f"paths.root={tmp_path}"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: cannot listen on 127.0.0.1:{port}") and len(err.splitlines()) == 1


def test_a_given_decode_rows_is_kept_and_the_requests_computed_at_once_follow_the_run_defaults():
    from ark.serve import SERVE_ROWS, in_flight, served_config

    assert served_config([]).backbone.local.decode_rows == SERVE_ROWS == 8
    assert served_config(["backbone.local.decode_rows=2"]).backbone.local.decode_rows == 2
    assert in_flight(served_config([])) == 24  # 3 agents x 8 queries: each request of a default run is computed
    assert in_flight(served_config(["agent.n_agents=1", "eval.concurrency=4"])) == 4


def test_the_printed_run_command_carries_the_served_models_name_sampling_and_address():
    from ark import build
    from ark.serve import run_command, served_config

    embedded = build.spec(served_config([]), "evaluate").backbone
    assert run_command(embedded, "http://127.0.0.1:8000/v1") == (
        "python -m ark.stages.evaluate backbone=served backbone.name=smollm2 backbone.model=openai/smollm2 "
        "eval.concurrency=2 eval.limit=5")  # served.yaml holds the embedded model's sampling and ark serve's address;
    # 2 queries of 3 agents fit its 8 decoding rows (the run's default, 8 queries, is 24 requests)
    student = build.spec(served_config(["backbone=student", "backbone.local.adapter=/x/my-student"]),
                         "evaluate").backbone
    command = run_command(student, "http://0.0.0.0:9000/v1")
    assert "backbone.name=smollm2-my-student backbone.model=openai/smollm2-my-student" in command
    assert "backbone.api_base=http://0.0.0.0:9000/v1" in command
    assert "backbone.temperature=0.0" in command and "backbone.max_tokens=256" in command


@pytest.mark.parametrize("rows, concurrency", [(1, 1), (2, 1), (6, 2), (12, 4), (24, None), (64, None)])
def test_the_printed_run_keeps_no_more_requests_in_flight_than_the_server_decodes_together(rows, concurrency):
    from ark import build
    from ark.serve import run_command, served_config

    backbone = build.spec(served_config([f"backbone.local.decode_rows={rows}"]), "evaluate").backbone
    words = run_command(backbone, "http://127.0.0.1:8000/v1").split()
    asked = [w.split("=")[1] for w in words if w.startswith("eval.concurrency=")]
    assert asked == ([] if concurrency is None else [str(concurrency)])  # the run's default (8) where it fits


def test_the_printed_command_composes_to_a_run_against_the_served_model():
    from ark import build
    from ark.agent.backbones import LocalBackbone
    from ark.config import compose

    words = ("backbone=served backbone.name=smollm2-s backbone.model=openai/smollm2-s "
             "backbone.api_base=http://127.0.0.1:9000/v1 backbone.max_tokens=256").split()
    backbone = build.spec(compose(words), "evaluate").backbone
    assert not isinstance(backbone, LocalBackbone) and backbone.endpoint() == "http://127.0.0.1:9000/v1"
    assert backbone.name == "smollm2-s" and backbone.max_tokens == 256 and backbone.api_key_env is None


def test_on_stopping_the_server_says_how_full_its_batched_decoding_steps_were(tokenizer, monkeypatch, tmp_path,
                                                                             capfd):
    import urllib.request

    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, intermediate_size=128)
    model = LocalChatModel.from_model(LlamaForCausalLM(config).eval(), tokenizer, decode_rows=2, attention="torch")
    with served(model, monkeypatch, tmp_path) as (url, name, _):
        body = json.dumps({"model": name, "messages": MESSAGES, "max_tokens": 4, "temperature": 0}).encode()
        request = urllib.request.Request(f"{url}/chat/completions", body, {"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=60) as r:
            reply = json.loads(r.read())
    steps = reply["usage"]["completion_tokens"] - 1  # the first reply token comes from the prompt's pass
    err = capfd.readouterr().err
    assert f"ark serve: batched decoding: {steps} tokens in {steps} forward passes of 2 rows" in err, err


def test_a_reply_is_held_to_the_served_max_tokens_and_a_bad_max_tokens_is_a_400():
    from ark.llm.server import HTTPError
    from ark.serve import capped

    seen = []
    generate = capped(lambda request: seen.append(request) or {}, 160)
    generate({"messages": [], "max_tokens": 1024})
    generate({"messages": [], "max_completion_tokens": 20})
    generate({"messages": []})
    assert [r["max_tokens"] for r in seen] == [160, 20, 160]
    for bad in ("many", 0, -5, 2.5, True):
        with pytest.raises(HTTPError) as e:
            generate({"messages": [], "max_tokens": bad})
        assert e.value.status == 400


def test_an_idle_server_lets_its_kept_prompts_shrink_once_after_each_burst_and_never_while_a_request_runs():
    import threading
    import time

    from ark.serve import IdleRelease

    class Model:  # LocalChatModel's part: what its kept prompts are shrunk to
        shrunk: list = []

        def shrink_kept(self, tokens):
            self.shrunk.append(tokens)

    def released(times: int) -> bool:
        deadline = time.monotonic() + 10
        while len(shrunk) < times and time.monotonic() < deadline:
            time.sleep(0.02)
        return shrunk == [100] * times

    model, started, finish = Model(), threading.Event(), threading.Event()
    shrunk = model.shrunk
    idle = IdleRelease(model, idle_s=0.3, keep_tokens=100).start()
    try:
        quick = idle.wrap(lambda request: "reply")
        slow = idle.wrap(lambda request: started.set() or finish.wait(10) and "reply")
        time.sleep(0.5)
        assert shrunk == []  # nothing was computed yet
        assert quick({}) == "reply"
        ended = time.monotonic()
        assert released(1) and time.monotonic() - ended >= 0.3  # after 0.3 s without a request, not before
        time.sleep(0.6)
        assert shrunk == [100]  # once a burst
        worker = threading.Thread(target=slow, args=({},))
        worker.start()
        started.wait(10)
        time.sleep(0.8)
        assert shrunk == [100]  # a request running for 0.8 s is not idleness
        finish.set()
        worker.join(10)
        assert released(2)
    finally:
        idle.stop()


def test_while_requests_run_the_server_gives_free_heap_pages_back_every_period_and_not_when_idle():
    import threading
    import time

    from ark.serve import IdleRelease

    class Model:
        def shrink_kept(self, tokens):
            pass

    trims, started, finish = [], threading.Event(), threading.Event()
    idle = IdleRelease(Model(), idle_s=0.2, keep_tokens=100, trim_s=0.1, trim=lambda: trims.append(time.monotonic()))
    idle.start()
    try:
        time.sleep(0.4)
        assert trims == []  # nothing runs: nothing to give back
        slow = idle.wrap(lambda request: started.set() or finish.wait(10) and "reply")
        worker = threading.Thread(target=slow, args=({},))
        worker.start()
        started.wait(10)
        time.sleep(0.75)
        during = len(trims)
        assert 4 <= during <= 8  # about one a period while the request runs
        assert all(b - a >= 0.09 for a, b in zip(trims, trims[1:]))  # never more often than the period
        finish.set()
        worker.join(10)
        time.sleep(0.6)
        assert len(trims) <= during + 1  # none once it ended (the idle release's own trim is the model's)
    finally:
        idle.stop()
