"""The arena's chat-completions client: a thin httpx wrapper for the `llm:<model>` agent.

Only this module touches httpx for the LLM agent (arena/agents/llm.py calls it). It speaks the OpenAI-compatible
`POST {base}/chat/completions` protocol with tools, and returns plain values: the assistant message as a dict
and the token usage. Transport failures, HTTP errors and undecodable replies all become `ChatError`, so that the
agent can end its episode cleanly instead of crashing the runner. Settings come from the environment:
GUARDRAIL_LLM_BASE_URL / GUARDRAIL_LLM_API_KEY first, then OPENAI_BASE_URL / OPENAI_API_KEY.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Mapping

import httpx

__all__ = ["ChatError", "ChatReply", "ChatClient", "chat_settings"]

DEFAULT_BASE_URL = "https://api.openai.com/v1"


class ChatError(Exception):
    """The chat API could not be reached, refused the request, or answered something unreadable."""


@dataclass(frozen=True)
class ChatReply:
    """The assistant's message and the tokens the call used."""

    message: dict[str, Any]
    usage: dict[str, int] = field(default_factory=dict)
    finish_reason: str | None = None


def chat_settings(env: Mapping[str, str] | None = None) -> tuple[str, str | None]:
    """(base URL, API key) from the environment; the guardrail-specific names win."""
    e = os.environ if env is None else env
    base = e.get("GUARDRAIL_LLM_BASE_URL") or e.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL
    key = e.get("GUARDRAIL_LLM_API_KEY") or e.get("OPENAI_API_KEY")
    return base.rstrip("/"), key


class ChatClient:
    """One model behind an OpenAI-compatible endpoint."""

    def __init__(self, model: str, base_url: str, api_key: str | None = None, timeout_s: float = 60.0,
                 transport: httpx.BaseTransport | None = None):
        self.model = model
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._http = httpx.Client(base_url=base_url.rstrip("/"), headers=headers, timeout=timeout_s,
                                  transport=transport)

    def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]],
                 max_tokens: int | None = None) -> ChatReply:
        body: dict[str, Any] = {"model": self.model, "messages": messages, "tools": tools, "tool_choice": "auto"}
        if max_tokens is not None:
            body["max_tokens"] = max_tokens
        try:
            r = self._http.post("/chat/completions", json=body)
        except httpx.HTTPError as e:
            raise ChatError(f"chat API unreachable: {type(e).__name__}: {e}") from e
        if r.status_code >= 400:
            raise ChatError(f"chat API answered {r.status_code}: {r.text[:300]}")
        try:
            doc = r.json()
            choice = doc["choices"][0]
            msg = dict(choice["message"])
        except (ValueError, KeyError, IndexError, TypeError) as e:
            raise ChatError(f"chat API reply is not a chat completion: {r.text[:300]}") from e
        usage = {k: int(v) for k, v in (doc.get("usage") or {}).items() if isinstance(v, int)}
        return ChatReply(message=msg, usage=usage, finish_reason=choice.get("finish_reason"))

    def close(self) -> None:
        self._http.close()


def preflight(model: str, *, env: Mapping[str, str] | None = None, timeout_s: float = 30.0,
              transport: httpx.BaseTransport | None = None) -> str | None:
    """One minimal chat request (max_tokens=1) to `model`: None when the API answers, else why not. A bench of
    `llm:` episodes asks first, so an API that is down or not configured fails the run at once (exit 3) instead of
    recording every episode as an agent that did nothing."""
    base, key = chat_settings(env)
    client = ChatClient(model, base, key, timeout_s=timeout_s, transport=transport)
    try:
        client.complete([{"role": "user", "content": "ping"}], [], max_tokens=1)
    except ChatError as e:
        return f"{e} (at {base})"
    finally:
        client.close()
    return None
