"""Test double: a scripted OpenAI-compatible endpoint on loopback (served by ark.llm.server.ChatServer)."""
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


class ScriptedEndpoint:
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

    def serve(self) -> ChatServer:
        return ChatServer(self.generate, model_name="fake")
