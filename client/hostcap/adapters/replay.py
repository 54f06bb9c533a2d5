"""Recorded model responses, played to the real SDK client.

    replay = RecordedResponses.load("docs/examples/recorded/openai_agent.json")
    client = openai.AsyncOpenAI(api_key="recorded", http_client=replay.async_client())

`RecordedResponses` is an `httpx2.MockTransport` handler (the HTTP library
the openai and anthropic SDKs use): each request the SDK sends is kept
(`requests`, the parsed JSON bodies) and answered with the next recorded
response body, in order. No network is touched; a request past the end of
the recording is answered 500 with an error body, which the SDK raises.
The examples use it when no API key is set, and the tests use it to check
what the SDK sent (the tools, the tool results).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from typing import Any

import httpx2


class RecordedResponses:
    """Replays `bodies` (one JSON response body per request) to an SDK client."""

    def __init__(self, bodies: Sequence[Mapping[str, Any]]) -> None:
        self.bodies = [dict(body) for body in bodies]
        #: (method, path, JSON body) of every request the SDK sent, in order.
        self.requests: list[tuple[str, str, Any]] = []

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> RecordedResponses:
        """A recording file: a JSON object whose `responses` is the list of bodies."""
        with open(path, encoding="utf-8") as file:
            data = json.load(file)
        if not isinstance(data, dict) or not isinstance(data.get("responses"), list):
            raise ValueError(f"{os.fspath(path)}: expected an object with a 'responses' list")
        return cls(data["responses"])

    @property
    def exhausted(self) -> bool:
        return len(self.requests) >= len(self.bodies)

    def bodies_sent(self) -> list[Any]:
        return [body for _, _, body in self.requests]

    def handle(self, request: httpx2.Request) -> httpx2.Response:
        try:
            body: Any = json.loads(request.content) if request.content else None
        except ValueError:
            body = None
        index = len(self.requests)
        self.requests.append((request.method, request.url.path, body))
        if index >= len(self.bodies):
            return httpx2.Response(
                500,
                json={
                    "error": {"type": "recording_exhausted", "message": "no recorded response left"}
                },
            )
        return httpx2.Response(200, json=self.bodies[index])

    def transport(self) -> httpx2.MockTransport:
        return httpx2.MockTransport(self.handle)

    def async_client(self) -> httpx2.AsyncClient:
        """An async HTTP client for the SDK's `http_client=`."""
        return httpx2.AsyncClient(transport=self.transport())
