"""Talking to an OpenAI-compatible server: targets, requests, responses as received.

- :mod:`harness.client.target`: :class:`TargetConfig`, the SDK client, server facts.
- :mod:`harness.client.completions`: one chat-completion request, within its bounds.
- :mod:`harness.client.wire`: its response (a body or an SSE stream), parsed as received.
"""

from harness.client.target import TargetConfig, fetch_target_info, make_client

__all__ = ["TargetConfig", "fetch_target_info", "make_client"]
