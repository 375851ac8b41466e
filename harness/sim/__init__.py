"""The reference OpenAI-compatible server with fault injection (``harness sim``).

Owned by issue 3. Public API (stable, others build on it):

- ``SimProfile`` / ``PROFILES`` / ``get_profile(name)`` in ``harness.sim.profiles``
- ``create_app(profile, scenarios_dir=..., gsm8k_path=..., latency_ms=..., seed=...)``
  -> ASGI app, in ``harness.sim.app``
- ``serve_in_thread(profile="healthy", **kw)`` -> context manager yielding the base URL
  (``http://127.0.0.1:<port>``; the OpenAI base_url is that + ``/v1``), in ``harness.sim.server``
"""
