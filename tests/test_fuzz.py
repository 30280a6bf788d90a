"""Property-based fuzzing of the surfaces that read what others write (hypothesis, a fixed budget of examples each):
``ark serve``'s chat API, ``ark mcp``'s JSON-RPC lines and the run files ``ark compare`` reads. Each must answer
every input with its own error (a 4xx JSON error, a JSON-RPC error, one ``UserError`` line), never a traceback, a
5xx or a hang, and go on serving."""
import json
import urllib.error
import urllib.request

import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from ark.errors import UserError  # noqa: E402

pytestmark = pytest.mark.e2e
EXAMPLES = 150  # per surface; the note in docs/reliability.md states it
FUZZ = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)

# any JSON value, the odd ones first: NaN and infinities, integers past 64 bits, lone surrogates, deep-ish nesting
scalars = (st.none() | st.booleans() | st.integers(min_value=-(2**80), max_value=2**80)
           | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=30)
           | st.sampled_from(["\ud800", "a\udfffb", "", "auto", "function", "user", "tool"]))
json_values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4)
                           | st.dictionaries(st.text(max_size=8), inner, max_size=4), max_leaves=12)
FIELDS = ["model", "messages", "tools", "tool_choice", "temperature", "top_p", "seed", "max_tokens", "stream",
          "stream_options", "n"]
messages = st.lists(st.fixed_dictionaries({"role": st.sampled_from(["user", "system", "assistant", "tool", "x"]) | json_values},
                                          optional={"content": json_values, "tool_calls": json_values,
                                                    "tool_call_id": json_values, "name": json_values}), max_size=3)
bodies = st.fixed_dictionaries({"messages": messages | json_values},
                               optional={k: json_values for k in FIELDS if k != "messages"}
                               | {"stream": st.booleans() | json_values})
# requests the schema admits, streamed, with any stream_options
plain_messages = st.lists(st.fixed_dictionaries({"role": st.sampled_from(["user", "system"]),
                                                "content": st.text(max_size=20)}), min_size=1, max_size=3)
streaming = st.fixed_dictionaries({"messages": plain_messages, "stream": st.just(True)},
                                  optional={"stream_options": st.fixed_dictionaries(
                                      {}, optional={"include_usage": st.booleans() | json_values}) | json_values})


def dumps(value) -> bytes:
    """JSON as a client may send it: NaN and Infinity as Python writes them, surrogates escaped."""
    return json.dumps(value, allow_nan=True).encode()


@pytest.fixture(scope="module")
def chat_server():
    """``ark serve``'s server (its schema, streaming and log) around a scripted model (a test double)."""
    from ark.llm.schema import check_chat_request
    from ark.llm.server import chat_completion
    from ark.serve import openai_server

    calls = []

    def generate(request: dict) -> dict:
        calls.append(request)
        return chat_completion("slow", {"role": "assistant", "content": "ok"}, "stop", 1, 1)

    with openai_server(generate, lambda b: check_chat_request(b, "slow"), log=lambda line: None) as server:
        yield server, calls


@FUZZ
@given(body=bodies | streaming | json_values.map(lambda v: {"messages": v}) | json_values)
def test_serve_answers_every_body_with_a_reply_or_a_4xx_json_error(chat_server, body):
    server, calls = chat_server
    req = urllib.request.Request(server.url + "/chat/completions", dumps(body), {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            status, streamed, raw = r.status, r.headers["Content-Type"] == "text/event-stream", r.read()
    except urllib.error.HTTPError as e:
        status, streamed, raw = e.code, False, e.read()
    assert streamed == (status == 200 and isinstance(body, dict) and body.get("stream") is True), (status, raw[:300])
    if streamed:  # events of JSON chunks, [DONE] last
        events = raw.decode().split("\n\n")
        assert events[-2:] == ["data: [DONE]", ""]
        answer = [json.loads(event.removeprefix("data: ")) for event in events[:-2]]
    else:
        answer = json.loads(raw)
    assert status in (200, 400, 404), (status, answer)
    if status == 200:  # what reached the model is a request the schema admits
        from ark.llm.schema import check_chat_request

        check_chat_request(calls[-1], "slow")
    else:
        assert answer["error"]["type"] in ("invalid_request_error", "model_not_found")
        assert "\n" not in answer["error"]["message"]


@FUZZ
@given(value=json_values, raw=st.binary(max_size=60), shape=st.integers(0, 2))
def test_every_mcp_line_is_passed_on_or_refused_with_a_json_rpc_error(value, raw, shape):
    from ark.tools.mcp import INVALID_PARAMS, INVALID_REQUEST, PARSE_ERROR, refusal

    message = {"jsonrpc": "2.0", "id": value, "method": "tools/call", "params": value} if shape == 1 else value
    line = raw if shape == 2 else dumps(message)
    answer = refusal(line)
    if answer is None:  # what the MCP session gets: one JSON-RPC 2.0 object, a valid id, params an object
        parsed = json.loads(line)
        assert isinstance(parsed, dict) and parsed.get("jsonrpc") == "2.0"
        assert isinstance(parsed.get("params", {}), dict)
        json.dumps(parsed, ensure_ascii=False).encode("utf-8")
    else:
        code, text, reply_to = answer
        assert code in (PARSE_ERROR, INVALID_REQUEST, INVALID_PARAMS) and "\n" not in text
        assert reply_to is None or isinstance(reply_to, (str, int))


RUN_FILES = ["config.yaml", "metrics.json", "stats.json", "scores.jsonl"]


@FUZZ
@given(name=st.sampled_from(RUN_FILES), content=st.binary(max_size=200) | json_values.map(dumps))
def test_a_run_file_of_any_content_is_read_or_refused_in_one_line(tmp_path_factory, name, content):
    from pathlib import Path

    from ark.report.runs import checked_metrics, checked_scores, read_mapping

    d = Path(tmp_path_factory.mktemp("run"))
    (d / name).write_bytes(content)
    try:
        if name == "scores.jsonl":
            checked_scores(d)
        elif name == "metrics.json":
            checked_metrics(d / name)
        else:
            read_mapping(d / name, name)
    except UserError as e:
        assert str(d / name) in str(e) and "\n" not in str(e)


shipped_rows = st.lists(st.fixed_dictionaries({}, optional={"id": json_values, "question": json_values,
                                                            "unit": json_values, "hit@1": json_values}), max_size=3)


@FUZZ
@given(content=st.binary(max_size=200) | shipped_rows.map(lambda rows: b"\n".join(map(dumps, rows))))
def test_a_shipped_scores_file_of_any_content_is_read_or_refused_in_one_line(tmp_path_factory, content):
    """ark compare's shipped scores (a published entry's run from results/scores) read the same way."""
    import shutil
    from pathlib import Path

    import yaml

    from ark.report.shipped import shipped_run
    from ark.runs.identity import run_name
    from tests.conftest import ROOT

    root = Path(tmp_path_factory.mktemp("results"))
    entry = root / "baseline" / "phenopackets-lpo-bm25"
    shutil.copytree(ROOT / "results" / "baseline" / "phenopackets-lpo-bm25", entry)
    path = root / "scores" / "baseline" / "phenopackets-lpo-bm25"
    path.mkdir(parents=True)
    path /= f"{run_name(yaml.safe_load((entry / 'config.yaml').read_text()))}.jsonl"
    path.write_bytes(content)
    try:
        shipped_run(entry)
    except UserError as e:
        assert str(path) in str(e) and "\n" not in str(e)


query_rows = st.lists(st.fixed_dictionaries({"id": st.text(min_size=1, max_size=5)},
                                            optional={"query": json_values, "answer_ids": json_values,
                                                      "meta": json_values}), max_size=3)


@FUZZ
@given(content=st.binary(max_size=200) | query_rows.map(lambda rows: b"\n".join(map(dumps, rows))),
       split=st.sampled_from(["test", "test-spread", "test-0.5"]))
def test_a_query_file_of_any_content_is_read_or_refused_in_one_line(tmp_path_factory, content, split):
    from pathlib import Path

    from ark.data.queries import load_queries

    d = Path(tmp_path_factory.mktemp("queries"))
    (d / "test.jsonl").write_bytes(content)
    try:
        rows = load_queries(d, split)
    except UserError as e:
        assert "\n" not in str(e)
    else:
        assert all(isinstance(r, dict) and isinstance(r["id"], str) for r in rows)


packets = st.lists(st.fixed_dictionaries({"id": st.text(min_size=1, max_size=5)},
                                         optional={k: json_values for k in ("interpretations", "diseases",
                                                                            "phenotypicFeatures", "metaData")}),
                   max_size=3)


@FUZZ
@given(content=st.binary(max_size=200) | packets.map(lambda rows: b"\n".join(map(dumps, rows))))
def test_a_phenopacket_file_of_any_content_is_read_or_refused_in_one_line(tmp_path_factory, content):
    """The phenopacket reader and the fields a query is made of (as make_phenopacket_queries reads them)."""
    from pathlib import Path

    from ark.data.phenopackets import _structure, disease_ids, gene_symbols, phenotype_ids, pmid_of, read_phenopackets

    path = Path(tmp_path_factory.mktemp("packets")) / "cases.jsonl"
    path.write_bytes(content)
    try:
        for n, packet in enumerate(read_phenopackets(path), 1):
            with _structure(n, packet):
                disease_ids(packet), gene_symbols(packet), phenotype_ids(packet), pmid_of(packet)
    except UserError as e:
        assert "\n" not in str(e)
