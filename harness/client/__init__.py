"""Talking to an OpenAI-compatible server: targets, requests, responses as received.

- :mod:`harness.client.target`: :class:`TargetConfig`, the SDK client, server facts.
- :mod:`harness.client.completions`: one chat-completion request, parsed as received.
"""

from harness.client.target import TargetConfig, fetch_target_info, make_client

__all__ = ["TargetConfig", "fetch_target_info", "make_client"]
