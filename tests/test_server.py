"""The loopback chat server under load, with a slow fake model: a request whose client went away is not computed,
the queue is bounded (503 + Retry-After, which the LLM client retries), and a disconnect prints nothing."""
import asyncio
import json
import logging
import threading
import time
import urllib.error
import urllib.request

import pytest

from ark.llm.client import LLMClient
from ark.llm.settings import Backbone, RetryPolicy
from ark.llm.server import ChatServer, chat_completion


class SlowModel:
    """A fake model that takes ``delay`` seconds a request, one request at a time, and counts its generations;
    ``hold`` (an Event) keeps every generation waiting until it is set."""

    def __init__(self, delay: float = 0.0, hold: threading.Event | None = None):
        self.delay, self.hold, self.calls = delay, hold, 0
        self.lock = threading.Lock()

    def generate(self, request: dict) -> dict:
        with self.lock:
            self.calls += 1
            if self.hold is not None:
                self.hold.wait(10)
            time.sleep(self.delay)
        return chat_completion(request.get("model", "slow"), {"role": "assistant", "content": "ok"}, "stop", 1, 1)


def post(server: ChatServer, timeout: float, seed: int = 0):
    """(status, headers) of one chat request; ("timeout", None) when the client gives up first."""
    body = json.dumps({"model": "slow", "messages": [{"role": "user", "content": "hi"}], "seed": seed}).encode()
    req = urllib.request.Request(server.url + "/chat/completions", body, {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            json.load(r)
            return r.status, r.headers
    except urllib.error.HTTPError as e:
        return e.code, e.headers
    except (TimeoutError, urllib.error.URLError):
        return "timeout", None


def in_threads(fn, n: int) -> list:
    out = [None] * n
    threads = [threading.Thread(target=lambda i=i: out.__setitem__(i, fn(i))) for i in range(n)]
    for t in threads:
        t.start()
        time.sleep(0.005)  # arrival order = index
    for t in threads:
        t.join()
    return out


def wait_for(condition, seconds: float = 5.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.01)


@pytest.mark.parametrize("keep", [False, True])
@pytest.mark.e2e
def test_requests_whose_client_timed_out_are_not_computed(keep, caplog, capfd):
    """N clients time out (their requests queue behind a slow generation), then retry: N + 1 generations (the
    abandoned one that was already running, then one per retry), not one per attempt; N when the abandoned reply
    answers its retry (``keep_abandoned``)."""
    n, model = 8, SlowModel(delay=0.25)
    caplog.set_level(logging.DEBUG)
    with ChatServer(model.generate, workers=1, keep_abandoned=keep) as server:
        first = in_threads(lambda i: post(server, timeout=0.1, seed=i), n)
        assert first == [("timeout", None)] * n
        wait_for(lambda: server.dropped == n - 1)
        retried = in_threads(lambda i: post(server, timeout=30, seed=i), n)
        assert [status for status, _ in retried] == [200] * n
        assert server.dropped == n - 1 and server.abandoned == 1 and server.reused == keep
        assert server.generated == model.calls == n + (not keep)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text
    assert "Traceback" not in capfd.readouterr().err


def test_a_full_queue_answers_503_with_retry_after():
    hold = threading.Event()
    model = SlowModel(hold=hold)
    with ChatServer(model.generate, workers=1, max_queue=2, retry_after=3) as server:
        waiting = [threading.Thread(target=post, args=(server, 30)) for _ in range(2)]
        for t in waiting:
            t.start()
        wait_for(lambda: server.requests == 2)
        status, headers = post(server, timeout=5)
        assert status == 503 and headers["Retry-After"] == "3" and server.rejected == 1
        hold.set()
        for t in waiting:
            t.join()
        assert post(server, timeout=5)[0] == 200 and model.calls == 3


def test_the_llm_client_retries_a_503_until_it_is_served():
    model = SlowModel(delay=0.1)
    backbone = Backbone(name="slow", model="openai/slow", max_tokens=8)
    with ChatServer(model.generate, workers=1, max_queue=1) as server:
        client = LLMClient(backbone, None, RetryPolicy(max_attempts=20, base_delay=0.05, max_delay=0.2, timeout=30),
                           api_base=server.url)

        async def agents():
            return await asyncio.gather(*[client.complete([{"role": "user", "content": "hi"}], None, seed=i)
                                          for i in range(3)])

        results = asyncio.run(agents())
    assert all(r.error is None and r.message["content"] == "ok" for r in results)
    assert server.rejected >= 1 and model.calls == 3  # rejected attempts cost no generation


def test_stopping_during_a_generation_waits_for_it_quietly(caplog, capfd):
    """The server stops while a generation runs for a client still waiting: no traceback, and no generation thread
    left behind (one inside torch when the process exits aborts it)."""
    model = SlowModel(delay=0.5)
    caplog.set_level(logging.DEBUG)
    with ChatServer(model.generate, workers=1) as server:
        waiting = threading.Thread(target=post, args=(server, 5))
        waiting.start()
        wait_for(lambda: model.calls == 1)
    waiting.join()
    assert not [t for t in threading.enumerate() if t.name.startswith("chat-generate")]
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text
    assert "Traceback" not in capfd.readouterr().err


# ------------------------------------------------------------------ a client that misbehaves
def raw(server: ChatServer):
    import socket

    host, port = server.socket.getsockname()[:2]
    return socket.create_connection((host, port), timeout=5)


def head(length: int | None, extra: str = "") -> bytes:
    size = "" if length is None else f"Content-Length: {length}\r\n"
    return (f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n{size}{extra}"
            "\r\n").encode()


def status_of(sock) -> int | None:
    """The status code of the reply on ``sock``; None when the server closed it without one."""
    data = b""
    while b"\r\n" not in data:
        chunk = sock.recv(4096)
        if not chunk:
            return None
        data += chunk
    return int(data.split(b" ", 2)[1])


def test_a_body_over_the_limit_is_refused_before_it_is_read():
    model = SlowModel()
    with ChatServer(model.generate, workers=1, max_body_bytes=1000) as server:
        declared = raw(server)
        declared.sendall(head(400 * 2**20))  # announces 400 MB, sends none of it
        assert status_of(declared) == 413
        chunked = raw(server)  # no length announced: counted as it arrives
        chunked.sendall(head(None, "Transfer-Encoding: chunked\r\n") + b"800\r\n" + b"x" * 2048 + b"\r\n")
        assert status_of(chunked) == 413
        assert post(server, 5)[0] == 200 and model.calls == 1


def test_half_sent_bodies_do_not_crowd_out_other_clients_and_time_out():
    model = SlowModel()
    with ChatServer(model.generate, workers=1, max_queue=16, body_timeout=1.0) as server:
        stalled = [raw(server) for _ in range(17)]
        for s in stalled:
            s.sendall(head(1000) + b'{"model": ')  # a body that never completes
        time.sleep(0.2)
        assert all(post(server, 5, seed=i)[0] == 200 for i in range(3))  # not 503: the half-sent are not queued
        assert [status_of(s) for s in stalled] == [408] * 17  # each ends at body_timeout
    assert model.calls == 3


def test_a_connection_without_headers_is_closed_and_connections_are_bounded():
    model = SlowModel()
    with ChatServer(model.generate, workers=1, header_timeout=0.5, max_connections=3) as server:
        silent = raw(server)
        silent.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost:")  # headers that never end
        start = time.monotonic()
        assert status_of(silent) is None and time.monotonic() - start < 3  # closed at header_timeout
        silent.close()
        time.sleep(0.2)
        held = [raw(server) for _ in range(2)]
        for s in held:
            s.sendall(head(100) + b"{")  # two connections in use, with the next one: the limit
        time.sleep(0.2)
        assert post(server, 5)[0] == 503  # a third is turned away, not queued without bound
        for s in held:
            s.close()
        time.sleep(0.2)
        assert post(server, 5)[0] == 200


def test_a_kept_alive_connection_that_trickles_its_next_headers_is_closed():
    """The header deadline holds for every request of a connection, not only its first: a client that completes one
    request and then sends the next one's headers a byte every 0.1 s is closed at header_timeout."""
    import socket

    model = SlowModel()
    with ChatServer(model.generate, workers=1, header_timeout=0.6) as server:
        s = raw(server)
        body = json.dumps({"model": "slow", "messages": [{"role": "user", "content": "hi"}]}).encode()
        s.sendall(head(len(body)) + body)
        assert status_of(s) == 200  # the first request, answered; the connection stays open
        s.settimeout(0.3)
        try:
            while s.recv(65536):  # the rest of the reply
                pass
        except socket.timeout:
            pass
        start = time.monotonic()
        try:
            for byte in b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n":
                s.sendall(bytes([byte]))
                time.sleep(0.1)
        except OSError:  # the server closed it
            pass
        s.settimeout(2)
        try:
            closed = s.recv(1) == b""
        except socket.timeout:
            closed = False  # still open: the trickle holds it
        except OSError:
            closed = True  # reset
        assert closed


def test_the_bodies_read_at_once_have_a_budget_across_connections():
    model = SlowModel()
    with ChatServer(model.generate, workers=1, max_body_bytes=2**20, max_pending_bytes=3 * 2**19) as server:
        held = [raw(server) for _ in range(3)]
        for s in held[:2]:
            s.sendall(head(2**20 - 10) + b"x" * (2**19 + 10))  # half a body each, both under the request limit
        time.sleep(0.3)
        held[2].sendall(head(2**20 - 10) + b"x" * (2**19 + 10))  # a third would pass the budget
        assert status_of(held[2]) == 503
        for s in held[:2]:
            s.close()
        time.sleep(0.3)
        assert post(server, 5)[0] == 200  # given back when those connections went away


@pytest.mark.e2e
def test_511_kept_alive_connections_trickling_their_next_headers_do_not_hold_the_server():
    """At the connection limit's scale: 511 connections that each finish one request and then send the next one's
    headers a byte at a time are closed at header_timeout, and a new client is served soon after."""

    async def request(reader, writer) -> int:
        body = json.dumps({"model": "slow", "messages": [{"role": "user", "content": "hi"}]}).encode()
        writer.write(head(len(body)) + body)
        await writer.drain()
        headers = await reader.readuntil(b"\r\n\r\n")
        length = int(next(line.split(b":")[1] for line in headers.split(b"\r\n")
                          if line.lower().startswith(b"content-length")))
        await reader.readexactly(length)
        return int(headers.split(b" ")[1])

    async def trickle(writer, stop: asyncio.Event) -> None:
        try:
            for byte in b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n" * 10:
                if stop.is_set():
                    return
                writer.write(bytes([byte]))
                await writer.drain()
                await asyncio.sleep(0.2)
        except OSError:  # closed by the server: what should happen
            pass

    def closed_by_server(connection) -> bool:
        # a FIN reads as end of stream; a close with trickled bytes still unread goes out as a reset instead
        reader = connection[0]
        return reader.at_eof() or isinstance(reader.exception(), ConnectionResetError)

    async def scenario(server) -> tuple[int, float, int]:
        connections = []
        for start in range(0, 511, 64):  # opened in waves: the queue holds a bounded number of requests
            wave = [await asyncio.open_connection(*server.socket.getsockname()[:2]) for _ in range(min(64, 511 - start))]
            assert all(s == 200 for s in await asyncio.gather(*(request(r, w) for r, w in wave)))
            connections += wave
        stop = asyncio.Event()
        trickles = [asyncio.create_task(trickle(w, stop)) for _, w in connections]
        await asyncio.sleep(0.3)
        start = time.monotonic()
        status = 503
        while status != 200 and time.monotonic() - start < 15:
            status = (await asyncio.to_thread(post, server, 5))[0]
            if status != 200:
                await asyncio.sleep(0.2)
        served_after = time.monotonic() - start
        waited = time.monotonic()  # each trickle would last 90 s: all are closed well before, at their deadline
        while sum(map(closed_by_server, connections)) < len(connections) and time.monotonic() - waited < 15:
            await asyncio.sleep(0.2)
        closed = sum(map(closed_by_server, connections))
        stop.set()
        await asyncio.gather(*trickles)
        for _, w in connections:
            w.close()
        return status, served_after, closed

    with ChatServer(SlowModel().generate, workers=1, header_timeout=1.0, max_connections=512) as server:
        status, served_after, closed = asyncio.run(scenario(server))
    assert status == 200 and served_after < 5  # within a few header deadlines, not for as long as they trickle
    assert closed == 511  # the server closed every trickling connection


@pytest.mark.parametrize("body", [b"[1, 2, 3]", b"[" * 100_000 + b"]" * 100_000, b'{"model": "slow"}', b"{not json"],
                         ids=["array", "nested-100k", "no-messages", "not-json"])
def test_a_clients_malformed_body_is_a_400_and_costs_no_generation(body):
    model = SlowModel()
    with ChatServer(model.generate) as server:
        req = urllib.request.Request(server.url + "/chat/completions", body, {"Content-Type": "application/json"})
        with pytest.raises(urllib.error.HTTPError) as answered:
            urllib.request.urlopen(req, timeout=10)
        assert answered.value.code == 400 and model.calls == 0
        assert post(server, timeout=10)[0] == 200  # and the server goes on serving


GOOD = {"model": "slow", "messages": [{"role": "user", "content": "hi"}]}
# what ark serve answered 200 (with a wrong reply or label) or 500 with a Python exception before it had a schema
BAD_REQUESTS = {
    "temperature-nan": ('{"temperature": NaN}', 400), "temperature-inf": ('{"temperature": Infinity}', 400),
    "temperature-negative": ({"temperature": -1}, 400), "temperature-huge": ({"temperature": 1e308}, 400),
    "temperature-string": ({"temperature": "hot"}, 400), "top_p-nan": ('{"top_p": NaN}', 400),
    "top_p-5": ({"top_p": 5}, 400), "top_p-negative": ({"top_p": -1}, 400), "model-other": ({"model": "gpt-9"}, 404),
    "messages-numbers": ({"messages": [1, 2]}, 400), "tools-string": ({"tools": "x"}, 400),
    "tools-number": ({"tools": [1]}, 400), "tool-without-name": ({"tools": [{"type": "function", "function": {}}]}, 400),
    "seed-string": ({"seed": "abc"}, 400), "seed-2^70": ({"seed": 2**70}, 400),
    "lone-surrogate": ('{"messages": [{"role": "user", "content": "a\\ud800b"}]}', 400),
    "max_tokens-zero": ({"max_tokens": 0}, 400), "role-unknown": ({"messages": [{"role": "robot", "content": "x"}]}, 400),
}


@pytest.mark.parametrize("case", BAD_REQUESTS, ids=list(BAD_REQUESTS))
def test_a_request_outside_the_chat_schema_is_a_4xx_json_error_and_costs_no_generation(case):
    """ark.llm.schema: every field's type and range checked before the request waits for a worker; the answer is
    OpenAI's error object (invalid_request_error, one line naming the field), never a 500."""
    from ark.llm.schema import check_chat_request

    change, status = BAD_REQUESTS[case]
    body = (json.dumps(GOOD)[:-1] + ", " + change[1:] if isinstance(change, str)
            else json.dumps({**GOOD, **change})).encode()
    model = SlowModel()
    with ChatServer(model.generate, check=lambda b: check_chat_request(b, "slow")) as server:
        req = urllib.request.Request(server.url + "/chat/completions", body, {"Content-Type": "application/json"})
        with pytest.raises(urllib.error.HTTPError) as answered:
            urllib.request.urlopen(req, timeout=10)
        error = json.load(answered.value)["error"]
        assert answered.value.code == status and model.calls == 0
        assert error["type"] == ("model_not_found" if status == 404 else "invalid_request_error")
        assert "\n" not in error["message"] and "Traceback" not in error["message"]
        assert post(server, timeout=10)[0] == 200  # and a valid request is served


def test_health_and_models_answer_as_openai_clients_expect():
    with ChatServer(SlowModel().generate, model_name="slow") as server:
        root = server.url.removesuffix("/v1")
        with urllib.request.urlopen(root + "/health", timeout=10) as r:
            assert r.status == 200 and json.load(r) == {"status": "ok", "model": "slow"}
        with urllib.request.urlopen(server.url + "/models", timeout=10) as r:
            (model,) = json.load(r)["data"]
        assert model["id"] == "slow" and model["owned_by"] == "ark" and model["object"] == "model"
