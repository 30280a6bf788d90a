"""A test double, not a model: a scripted OpenAI-compatible endpoint on loopback (``ark.llm.server.ChatServer``).

It answers every chat request with tool calls chosen by a script from the conversation so far (no language model
anywhere), and counts and keeps the requests. The tests and benchmarks use it; a user can dry-run a hosted
pipeline against it for free, e.g.::

    python -m ark.llm.fake --port 8765 &
    python -m ark.stages.evaluate backbone=gpt-4.1 backbone.model=openai/fake \\
        backbone.api_base=http://127.0.0.1:8765/v1 backbone.api_key_env=null llm.cache=null eval.limit=5 \\
        run.root=/tmp/dry
"""
from __future__ import annotations

import json
import re
import threading
import time

from ark.llm.server import ChatServer, HTTPError, chat_completion


def call(name: str, args: dict, i: int = 0) -> dict:
    return {"id": f"call_{i}", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}


def search_then_answer(request: dict) -> dict:
    """Step 1: search the question. Step 2: add the first node shown, then finish."""
    messages = request["messages"]
    question = next(m["content"] for m in messages if m["role"] == "user").removeprefix("Question: ")
    tool_results = [m for m in messages if m["role"] == "tool"]
    if not tool_results:
        return {"role": "assistant", "content": None, "tool_calls": [call("search_in_graph", {"query": question})]}
    shown = re.findall(r"^\[(\d+)\]", tool_results[-1]["content"], flags=re.M)
    calls = [call("add_to_answer", {"answer_nodes": [{"node_index": int(shown[0])}]}, 1)] if shown else []
    return {"role": "assistant", "content": None, "tool_calls": calls + [call("finish", {}, 2)]}


def search_explore_answer(request: dict) -> dict:
    """Step 1: search the question. Step 2: explore the first node's neighborhood. Step 3: add the first node
    shown, then finish."""
    messages = request["messages"]
    question = next(m["content"] for m in messages if m["role"] == "user").removeprefix("Question: ")
    tool_results = [m for m in messages if m["role"] == "tool"]
    shown = re.findall(r"^\[(\d+)\]", tool_results[-1]["content"], flags=re.M) if tool_results else []
    if len(tool_results) == 1 and shown:
        return {"role": "assistant", "content": None, "tool_calls": [
            call("search_in_neighborhood", {"node_index": int(shown[0]), "query": question})]}
    return search_then_answer(request)


SCRIPTS = {"search-answer": search_then_answer, "search-explore-answer": search_explore_answer}


class ScriptedEndpoint:
    """``script(request) -> assistant message``; the first ``fail_first`` requests get HTTP ``status``; each reply
    waits ``delay`` seconds (a model's latency)."""

    def __init__(self, script=search_then_answer, fail_first: int = 0, status: int = 429, delay: float = 0.0):
        self.script, self.fail_first, self.status, self.delay = script, fail_first, status, delay
        self.calls = 0
        self.requests: list[dict] = []  # every request body received
        self._lock = threading.Lock()

    def generate(self, request: dict) -> dict:
        with self._lock:
            self.calls += 1
            self.requests.append(request)
            failing = self.calls <= self.fail_first
        if failing:
            raise HTTPError(self.status, "rate limited" if self.status == 429 else "server error")
        if self.delay:
            time.sleep(self.delay)
        message = self.script(request)
        return chat_completion(request["model"], message, "tool_calls", prompt_tokens=100, completion_tokens=20)

    def serve(self, port: int = 0) -> ChatServer:
        return ChatServer(self.generate, model_name="fake", port=port)


def main(argv: list[str] | None = None) -> None:
    import argparse

    p = argparse.ArgumentParser(prog="python -m ark.llm.fake", description=__doc__.splitlines()[0])
    p.add_argument("--port", type=int, default=0, help="0: any free port (printed)")
    p.add_argument("--script", choices=sorted(SCRIPTS), default="search-answer")
    p.add_argument("--delay", type=float, default=0.0, help="seconds per reply")
    args = p.parse_args(argv)
    endpoint = ScriptedEndpoint(SCRIPTS[args.script], delay=args.delay)
    with ChatServer(endpoint.generate, model_name="fake", port=args.port) as server:
        print(f"fake OpenAI-compatible endpoint (scripted, no model) at {server.url}; Ctrl-C stops it", flush=True)
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            pass


if __name__ == "__main__":
    main()
