"""Model clients behind one small protocol, so the agent loop has one code path.

Conversations use the Anthropic message shape (role + content blocks:
`text`, `tool_use`, `tool_result`) because it is the richer of the two; the
OpenAI-compatible client translates to and from chat-completions on the wire.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from typing import Any, Protocol, Sequence

from sage_engine.errors import InvalidInput, LLMError

log = logging.getLogger(__name__)

PROVIDERS: tuple[str, ...] = ("anthropic", "openai")


@dataclass(frozen=True)
class ToolSpec:
    name: str
    description: str
    input_schema: dict[str, Any]


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    input: dict[str, Any]


@dataclass
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    calls: int = 0

    def add(self, other: "Usage") -> None:
        self.input_tokens += other.input_tokens
        self.output_tokens += other.output_tokens
        self.cache_read_tokens += other.cache_read_tokens
        self.cache_write_tokens += other.cache_write_tokens
        self.calls += other.calls

    @property
    def total(self) -> int:
        return self.input_tokens + self.output_tokens + self.cache_read_tokens + self.cache_write_tokens


@dataclass
class Response:
    """One model turn: its text, its tool calls, and the assistant message to
    append to the conversation (Anthropic block shape)."""

    text: str
    tool_calls: list[ToolCall]
    usage: Usage
    stop_reason: str | None
    content: list[dict[str, Any]] = field(default_factory=list)

    def assistant_message(self) -> dict[str, Any]:
        return {"role": "assistant", "content": self.content or [{"type": "text", "text": self.text or "(no text)"}]}


class LLM(Protocol):
    provider: str
    model: str

    def complete(
        self,
        system: str,
        messages: Sequence[dict[str, Any]],
        tools: Sequence[ToolSpec],
        *,
        tool_choice: str | None = None,
        max_tokens: int | None = None,
    ) -> Response:
        """One call. `tool_choice` names a tool the model must call, or None
        to let it answer in text (so it can reason before submitting)."""
        ...


# --------------------------------------------------------------------- anthropic


class AnthropicLLM:
    """The Messages API through the official SDK (retries, error types, usage)."""

    provider = "anthropic"

    def __init__(
        self,
        model: str,
        *,
        client: Any = None,
        api_key: str | None = None,
        base_url: str | None = None,
        max_tokens: int = 8192,
        max_retries: int = 4,
        timeout_s: float = 600.0,
        prompt_cache: bool = True,
    ):
        import anthropic

        self.model = model
        self.max_tokens = max_tokens
        self.prompt_cache = prompt_cache
        self._anthropic = anthropic
        if client is None:
            try:
                client = anthropic.Anthropic(api_key=api_key, base_url=base_url, max_retries=max_retries, timeout=timeout_s)
            except anthropic.AnthropicError as exc:
                raise LLMError(f"cannot create the Anthropic client: {exc}; set ANTHROPIC_API_KEY") from exc
        self.client = client

    def complete(self, system, messages, tools, *, tool_choice=None, max_tokens=None) -> Response:
        anthropic = self._anthropic
        kwargs: dict[str, Any] = {
            "model": self.model,
            "max_tokens": max_tokens or self.max_tokens,
            "system": system,
            "messages": _with_cache_breakpoint(messages) if self.prompt_cache else list(messages),
        }
        if tools:
            kwargs["tools"] = [{"name": t.name, "description": t.description, "input_schema": t.input_schema} for t in tools]
            # One submission per turn: each one is evaluated before the next is written.
            kwargs["tool_choice"] = (
                {"type": "tool", "name": tool_choice, "disable_parallel_tool_use": True}
                if tool_choice
                else {"type": "auto", "disable_parallel_tool_use": True}
            )
        try:
            msg = self.client.messages.create(**kwargs)
        except anthropic.APIStatusError as exc:
            raise LLMError(f"Anthropic API error {exc.status_code}: {_short(str(exc.message))}") from exc
        except anthropic.APIConnectionError as exc:
            raise LLMError(f"cannot reach the Anthropic API: {exc}") from exc
        except anthropic.APIResponseValidationError as exc:
            raise LLMError(f"the Anthropic API returned an unexpected response: {exc}") from exc
        content: list[dict[str, Any]] = []
        texts: list[str] = []
        calls: list[ToolCall] = []
        for block in msg.content:
            if block.type == "text":
                if block.text.strip():  # the API refuses empty text blocks when they are sent back
                    texts.append(block.text)
                    content.append({"type": "text", "text": block.text})
            elif block.type == "tool_use":
                calls.append(ToolCall(block.id, block.name, dict(block.input)))
                content.append({"type": "tool_use", "id": block.id, "name": block.name, "input": dict(block.input)})
            # Other block kinds (thinking, server tools) are not requested by this loop.
        u = msg.usage
        usage = Usage(
            input_tokens=u.input_tokens or 0,
            output_tokens=u.output_tokens or 0,
            cache_read_tokens=u.cache_read_input_tokens or 0,
            cache_write_tokens=u.cache_creation_input_tokens or 0,
            calls=1,
        )
        return Response("\n".join(texts), calls, usage, msg.stop_reason, content)


def _with_cache_breakpoint(messages: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Mark the end of the conversation for prompt caching: each round
    re-sends everything before it, so the next call reads that prefix from
    the cache (billed at a tenth) instead of paying for it again. Prefixes
    under the model's minimum (about 1k tokens) are simply not cached."""
    out = [dict(m) for m in messages]
    if not out:
        return out
    last = out[-1]
    blocks: list[dict[str, Any]] = (
        [{"type": "text", "text": last["content"]}] if isinstance(last["content"], str) else [dict(b) for b in last["content"]]
    )
    if blocks:
        blocks[-1]["cache_control"] = {"type": "ephemeral"}
    last["content"] = blocks
    return out


# ------------------------------------------------------------- openai-compatible


class OpenAICompatLLM:
    """Any chat-completions endpoint with function calling (OpenAI, vLLM,
    llama.cpp server, OpenRouter ...), spoken with httpx directly."""

    provider = "openai"

    def __init__(
        self,
        model: str,
        *,
        base_url: str,
        api_key: str | None = None,
        http_client: Any = None,
        max_tokens: int = 8192,
        timeout_s: float = 600.0,
    ):
        import httpx

        if not base_url:
            raise InvalidInput("the openai provider needs --base-url (e.g. https://api.openai.com/v1)")
        self.model = model
        self.max_tokens = max_tokens
        self.base_url = base_url.rstrip("/")
        self._httpx = httpx
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.client = http_client or httpx.Client(timeout=timeout_s)
        self._headers = headers

    def complete(self, system, messages, tools, *, tool_choice=None, max_tokens=None) -> Response:
        httpx = self._httpx
        body: dict[str, Any] = {
            "model": self.model,
            "max_tokens": max_tokens or self.max_tokens,
            "messages": [{"role": "system", "content": system}] + to_openai_messages(messages),
        }
        if tools:
            body["tools"] = [
                {"type": "function", "function": {"name": t.name, "description": t.description, "parameters": t.input_schema}}
                for t in tools
            ]
            body["tool_choice"] = {"type": "function", "function": {"name": tool_choice}} if tool_choice else "auto"
        try:
            resp = self.client.post(f"{self.base_url}/chat/completions", json=body, headers=self._headers)
        except httpx.HTTPError as exc:
            raise LLMError(f"cannot reach {self.base_url}: {exc}") from exc
        if resp.status_code >= 400:
            raise LLMError(f"{self.base_url} answered {resp.status_code}: {_short(resp.text)}")
        try:
            data = resp.json()
            choice = data["choices"][0]
            message = choice["message"]
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            raise LLMError(f"{self.base_url} returned no chat completion: {_short(resp.text)}") from exc
        text = message.get("content") or ""
        content: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
        calls: list[ToolCall] = []
        for tc in message.get("tool_calls") or []:
            fn = tc.get("function") or {}
            try:
                args = json.loads(fn.get("arguments") or "{}")
            except json.JSONDecodeError:
                # A malformed argument string is the model's mistake; hand it
                # back as an empty input so the loop can tell the model.
                args = {"_unparsed_arguments": fn.get("arguments", "")}
            if not isinstance(args, dict):
                args = {"_unparsed_arguments": fn.get("arguments", "")}
            calls.append(ToolCall(tc.get("id") or f"call_{len(calls)}", fn.get("name", ""), args))
            content.append({"type": "tool_use", "id": calls[-1].id, "name": calls[-1].name, "input": args})
        u = data.get("usage") or {}
        cached = (u.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
        usage = Usage(
            input_tokens=(u.get("prompt_tokens") or 0) - cached,
            output_tokens=u.get("completion_tokens") or 0,
            cache_read_tokens=cached,
            calls=1,
        )
        return Response(text, calls, usage, choice.get("finish_reason"), content)


def to_openai_messages(messages: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Anthropic-shaped turns to chat-completions messages: tool_use blocks
    become `tool_calls`, tool_result blocks become `tool` messages."""
    out: list[dict[str, Any]] = []
    for m in messages:
        content = m["content"]
        if isinstance(content, str):
            out.append({"role": m["role"], "content": content})
            continue
        texts = [b["text"] for b in content if b.get("type") == "text"]
        if m["role"] == "assistant":
            msg: dict[str, Any] = {"role": "assistant", "content": "\n".join(texts) or None}
            calls = [
                {"id": b["id"], "type": "function", "function": {"name": b["name"], "arguments": json.dumps(b["input"])}}
                for b in content
                if b.get("type") == "tool_use"
            ]
            if calls:
                msg["tool_calls"] = calls
            out.append(msg)
            continue
        for b in content:
            if b.get("type") == "tool_result":
                body = b.get("content", "")
                if isinstance(body, list):
                    body = "\n".join(x.get("text", "") for x in body)
                out.append({"role": "tool", "tool_call_id": b["tool_use_id"], "content": body})
        if texts:
            out.append({"role": "user", "content": "\n".join(texts)})
    return out


def make_llm(provider: str, model: str, *, base_url: str | None = None, api_key: str | None = None, max_tokens: int = 8192) -> LLM:
    """The client for `provider`; keys come from the caller (the CLI reads
    ANTHROPIC_API_KEY / OPENAI_API_KEY), never from deep inside the loop."""
    if provider == "anthropic":
        return AnthropicLLM(model, api_key=api_key, base_url=base_url, max_tokens=max_tokens)
    if provider == "openai":
        return OpenAICompatLLM(model, base_url=base_url or "https://api.openai.com/v1", api_key=api_key, max_tokens=max_tokens)
    raise InvalidInput(f"provider must be one of {', '.join(PROVIDERS)}, got {provider!r}")


def _short(text: str, n: int = 500) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 1] + "…"
