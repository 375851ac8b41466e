"""The reference OpenAI-compatible server with fault injection (``harness sim``).

Public API (stable, the tests and the other packages build on it):

- ``SimProfile`` / ``PROFILES`` / ``get_profile(name)`` in :mod:`harness.sim.profiles`
  (the table of profiles is in that module's docstring; ``harness sim --list-profiles``).
- ``Fault(kind, rate=1.0, start_turn=0, end_turn=None)`` in :mod:`harness.sim.faults`
  (kinds documented there); custom profiles via ``dataclasses.replace(profile, faults=...)``.
- ``create_app(profile, *, scenarios_dir="scenarios", gsm8k_path=None, gsm8k_faults=None,
  latency_ms=0, seed=0, capture=False)`` -> Starlette ASGI app, in :mod:`harness.sim.app`
  (``gsm8k_faults``: GSM8K question index -> infrastructure fault, ``{7: "http-500"}``).
- ``serve_in_thread(profile="healthy", *, scenarios_dir="scenarios", gsm8k_path=None,
  gsm8k_faults=None, latency_ms=0, seed=0, capture=False, host="127.0.0.1", port=0)``
  -> context manager
  yielding the base URL ``http://127.0.0.1:<port>`` (the OpenAI base_url is that +
  ``/v1``), in :mod:`harness.sim.server`; raises ``SimBootCrash`` for a profile that
  crashes at boot with ``capture=True``.
- ``GET /sim/stats`` on a running server (POST requests per path, the most in flight
  at once, infrastructure faults served, requests per GSM8K question, the last request
  bodies): ``fetch_stats(url) -> SimStats`` in :mod:`harness.sim.stats`.
- ``GET /sim/gsm8k.jsonl``: the GSM8K file the server answers from (download it with
  ``harness.gsm8k.data.load_dataset(url=...)``).
- Pytest: the ``sim_url``, ``gsm8k_sim`` and ``write_scenarios`` fixtures in
  ``tests/conftest.py``.

Layout: :mod:`~harness.sim.model` (plays scenarios, stateless per request),
:mod:`~harness.sim.faults` (fault injection), :mod:`~harness.sim.infra` (infrastructure
faults: HTTP errors, bad bodies, dropped connections), :mod:`~harness.sim.wire` (OpenAI
JSON and SSE shapes), :mod:`~harness.sim.stats` (what the server has seen),
:mod:`~harness.sim.tokens` (approximate token counts),
:mod:`~harness.sim.moe` (boot log, server info, routed experts),
:mod:`~harness.sim.gsm8k_model` (GSM8K answers).
"""
