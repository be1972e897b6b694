"""The llm:<model> agent against a fake OpenAI-compatible server on loopback that returns scripted tool calls."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from arena.agents import make_agent
from arena.agents.llm import LLMAgent
from arena.clients.llm import ChatClient, chat_settings
from arena.episode import run_episode
from arena.scenario import load_scenario

SC = load_scenario("ia-010")


def call(i: int, name: str, arguments: Any) -> dict[str, Any]:
    args = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return {"id": f"call_{i}", "type": "function", "function": {"name": name, "arguments": args}}


class FakeChat:
    """Serves scripted assistant replies in order and records every request body."""

    def __init__(self, replies: list[dict[str, Any]], status: int = 200):
        self.replies = list(replies)
        self.status = status
        self.requests: list[dict[str, Any]] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                body["_auth"] = self.headers.get("Authorization")
                body["_path"] = self.path
                fake.requests.append(body)
                if fake.status != 200:
                    out = b'{"error": {"message": "overloaded"}}'
                    self.send_response(fake.status)
                else:
                    msg = fake.replies.pop(0) if fake.replies else {"role": "assistant", "content": "no more"}
                    out = json.dumps({"id": "x", "object": "chat.completion", "choices": [
                        {"index": 0, "message": msg, "finish_reason": "tool_calls"}],
                        "usage": {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110}}).encode()
                    self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

            def log_message(self, *a: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> "FakeChat":
        self.thread.start()
        return self

    def __exit__(self, *a: Any) -> None:
        self.server.shutdown()
        self.server.server_close()


def tool_messages(req: dict[str, Any]) -> list[str]:
    return [m["content"] for m in req["messages"] if m["role"] == "tool"]


def assistant(*calls: dict[str, Any]) -> dict[str, Any]:
    return {"role": "assistant", "content": None, "tool_calls": list(calls)}


def test_tool_loop_with_malformed_calls_runs_to_a_declaration(monkeypatch):
    replies = [
        assistant(call(1, "run", {"command": "kubectl get pods"})),
        assistant(call(2, "run", '{"command": "kubectl get pods"')),  # arguments are not JSON
        assistant(call(3, "rm_rf", {"path": "/"})),  # unknown tool
        assistant(call(4, "run", {})),  # missing argument
        {"role": "assistant", "content": "I think it is fixed."},  # no tool call at all
        assistant(call(5, "run", {"command": "curl -s svc-channel:8000/admin/config"}),
                  call(6, "declare_repair_complete", {"summary": "looked around"})),
    ]
    with FakeChat(replies) as fake:
        monkeypatch.setenv("GUARDRAIL_LLM_BASE_URL", fake.url)
        monkeypatch.setenv("GUARDRAIL_LLM_API_KEY", "sk-test")
        agent = make_agent("llm:fake-model", SC, 0)
        res = run_episode(SC, agent, seed=0)
    runs = [t["run"] for t in res.transcript if "run" in t]
    assert runs == ["kubectl get pods", "curl -s svc-channel:8000/admin/config"]
    assert res.declared_at is not None, "the declaration reached the runner"
    assert len(fake.requests) == 6
    first = fake.requests[0]
    assert first["model"] == "fake-model" and first["_auth"] == "Bearer sk-test"
    assert first["_path"] == "/v1/chat/completions"
    assert {t["function"]["name"] for t in first["tools"]} == {"run", "declare_repair_complete"}
    assert first["messages"][1]["content"] == SC.public.instruction
    # each malformed call came back to the model as an error tool result, naming what was wrong
    errors = [m for m in tool_messages(fake.requests[4]) if m.startswith("error:")]
    assert len(errors) == 3
    assert "not valid JSON" in errors[0] and "unknown tool 'rm_rf'" in errors[1] and "'command'" in errors[2]
    assert "NAME" in tool_messages(fake.requests[1])[0] or "exit code: 0" in tool_messages(fake.requests[1])[0]
    assert fake.requests[5]["messages"][-1]["role"] == "user"  # nudged to use a tool after plain text
    detail = res.to_json()["agent_detail"]
    assert detail["usage"]["total_tokens"] == 6 * 110 and detail["usage"]["calls"] == 6
    assert detail["usage"]["malformed_tool_calls"] == 3


def test_guard_rejection_reaches_the_model_as_the_declare_result():
    class OneRejection:
        def __init__(self):
            self.seen: list[list[dict[str, Any]]] = []
            self.replies = [assistant(call(1, "declare_repair_complete", {"summary": "done"})),
                            assistant(call(2, "declare_repair_complete", {"summary": "done now"}))]

        def complete(self, messages, tools, max_tokens=None):
            from arena.clients.llm import ChatReply

            self.seen.append([dict(m) for m in messages])
            return ChatReply(self.replies.pop(0), {"total_tokens": 5})

    from arena.agents import Declare, Observation

    client = OneRejection()
    agent = LLMAgent("m", client)
    assert isinstance(agent.act(Observation("fix it", 0, 0.0)), Declare)
    rejected = Observation("fix it", 1, 5.0, feedback=[("NOT_CONVERGED", "p99 above the SLO in 2 of 3 cycles")],
                           declaration_rejected=True)
    assert isinstance(agent.act(rejected), Declare)
    last = client.seen[1][-1]
    assert last["role"] == "tool" and last["tool_call_id"] == "call_1"
    assert "NOT_CONVERGED: p99 above the SLO" in last["content"]


def test_budgets_stop_the_loop_without_crashing():
    replies = [assistant(call(i, "run", {"command": "kubectl get pods"})) for i in range(20)]
    with FakeChat(replies) as fake:
        agent = LLMAgent("m", ChatClient("m", fake.url), max_tokens=3 * 110)
        res = run_episode(SC, agent, seed=0)
    assert agent.stop_reason == "token_budget" and agent.usage["calls"] == 3
    assert res.failure_mode == "budget_exhausted"
    ticks = iter([0.0, 10.0, 10_000.0, 10_000.0])
    with FakeChat(replies) as fake:
        agent = LLMAgent("m", ChatClient("m", fake.url), max_wall_s=100.0, clock=lambda: next(ticks))
        run_episode(SC, agent, seed=0)
    assert agent.stop_reason == "time_budget" and agent.usage["calls"] == 1
    with FakeChat(replies) as fake:
        agent = LLMAgent("m", ChatClient("m", fake.url), max_calls=2)
        run_episode(SC, agent, seed=0)
    assert agent.stop_reason == "step_budget" and len(fake.requests) == 2


def test_server_errors_end_the_episode_cleanly():
    with FakeChat([], status=503) as fake:
        agent = LLMAgent("m", ChatClient("m", fake.url))
        res = run_episode(SC, agent, seed=0)
    assert agent.stop_reason.startswith("chat_error") and "503" in agent.stop_reason
    assert res.failure_mode == "budget_exhausted" and res.steps == 0
    agent = LLMAgent("m", ChatClient("m", "http://127.0.0.1:9", timeout_s=2.0))
    run_episode(SC, agent, seed=0)
    assert agent.stop_reason.startswith("chat_error: chat API unreachable")


def test_settings_come_from_the_environment():
    assert chat_settings({"OPENAI_BASE_URL": "http://a/v1/", "OPENAI_API_KEY": "k"}) == ("http://a/v1", "k")
    env = {"OPENAI_BASE_URL": "http://a/v1", "GUARDRAIL_LLM_BASE_URL": "http://b/v1", "OPENAI_API_KEY": "k",
           "GUARDRAIL_LLM_API_KEY": "g"}
    assert chat_settings(env) == ("http://b/v1", "g")
    assert chat_settings({})[1] is None


@pytest.mark.parametrize("spec", ["llm:", "persona:"])
def test_incomplete_specs_are_rejected(spec):
    from guardrail.errors import InputError

    with pytest.raises(InputError):
        make_agent(spec, SC, 0)
