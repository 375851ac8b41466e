"""``harness sim``: run the reference OpenAI-compatible server with a fault profile.

Prints boot log lines like an inference server starting (from
:func:`harness.sim.moe.boot_log_lines`), then ``Serving on http://HOST:PORT`` once it
listens (other tools parse that line), and serves until SIGINT/SIGTERM. A profile
that crashes at boot (``capture-crash`` with ``--enable-return-routed-experts``)
prints an SGLang-like traceback to stderr and exits 1, like the real server.
An address that cannot be bound (port in use) exits 2. ``GET /sim/stats`` on the
running server says what it has seen (see :mod:`harness.sim.stats`).
``--gsm8k-fault INDEX=FAULT`` answers one GSM8K question with an infrastructure fault
(see :mod:`harness.sim.profiles`).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from harness.cli import ExitCode
from harness.options import rate
from harness.scenario.library import default_scenarios
from harness.sim.flavours import FLAVOURS
from harness.sim.profiles import INFRA_FAULTS, SimProfile, gsm8k_fault
from harness.sim.templates import TEMPLATES

HELP = "Run the built-in reference server (OpenAI-compatible, with fault profiles)."


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The arguments of ``harness sim``, added to ``p``."""
    p.add_argument(
        "--profile",
        default="healthy",
        help="fault profile (see --list-profiles; NAME@RATE and NAME@SCENARIO_ID also work)",
    )
    p.add_argument(
        "--fault-rate",
        type=rate,
        default=None,
        metavar="P",
        help="show the profile's faults in a P share of runs (drawn per run; e.g. 0.1)",
    )
    p.add_argument(
        "--fault-scenario",
        action="append",
        default=[],
        metavar="ID",
        help="show the profile's faults only in scenario ID (repeatable)",
    )
    p.add_argument("--list-profiles", action="store_true", help="print the profiles and exit")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default: loopback)")
    p.add_argument("--port", type=int, default=0, help="TCP port (0 = a free port)")
    p.add_argument("--latency-ms", type=float, default=0, help="delay added to every POST")
    p.add_argument(
        "--scenarios", default=None,
        help="scenario directory to play (default ./scenarios, else the shipped library)",
    )  # fmt: skip
    p.add_argument(
        "--play-unknown",
        action="store_true",
        help="answer a tool-calling conversation no scenario opens with by a generic reply "
        "(default: HTTP 404 'the reference server does not know this scenario')",
    )
    p.add_argument("--gsm8k", default=None, help="GSM8K jsonl answered on /v1/completions")
    p.add_argument(
        "--gsm8k-fault",
        action="append",
        type=gsm8k_fault,
        default=[],
        metavar="INDEX=FAULT",
        help="answer GSM8K question INDEX (0-based line of --gsm8k) with an infrastructure "
        f"fault, every time it is asked (repeatable; e.g. 7=http-500; FAULT: "
        f"{', '.join(INFRA_FAULTS)})",
    )
    p.add_argument("--seed", type=int, default=0, help="server seed (noise, GSM8K answers)")
    p.add_argument(
        "--enable-return-routed-experts",
        action="store_true",
        help="routed-experts capture (SGLang's flag of the same name)",
    )
    p.add_argument(
        "--server-flavour",
        default="reference",
        choices=list(FLAVOURS),
        help="answer as this released server version does (NaN encoding, /tokenize, "
        "limits, /server_info, routed experts; default: reference, the harness's own)",
    )
    p.add_argument(
        "--moe-model",
        default="deepseek-v3",
        choices=["deepseek-v3", "glm-4.5"],
        help="the simulated MoE model: its architecture decides which fusion lines the log "
        "holds (glm-4.5 fuses without the 'enabled' line, as SGLang's GLM-4.5/4.6)",
    )
    p.add_argument(
        "--server-info-api-key",
        metavar="KEY",
        default=None,
        help="report KEY in /server_info as SGLang reports its own keys (api_key, "
        "admin_api_key KEY-admin, launch_command ... --api-key KEY); requests are not "
        "checked against it (what the harness must keep out of its files)",
    )
    p.add_argument(
        "--chat-template",
        default="chatml",
        choices=list(TEMPLATES),
        help="the chat template /tokenize renders conversations with (default: chatml)",
    )


def _list_profiles() -> int:
    from harness.sim.profiles import PROFILES

    width = max(len(n) for n in PROFILES)
    for name, prof in PROFILES.items():
        print(f"{name:<{width}}  {prof.description}")
    return ExitCode.OK


def _say_scenarios(folder: str, n: int, play_unknown: bool) -> None:
    """Which scenario set the server plays; with none, a loud warning on stderr."""
    if n:
        print(f"Playing {n} scenario(s) from {folder}", flush=True)
        return
    unknown = (
        "answered with a generic reply (--play-unknown)"
        if play_unknown
        else "refused: HTTP 404 'the reference server does not know this scenario'"
    )
    print(
        f"WARNING: no scenario files in {folder!r}: this server plays no scenario, and every "
        f"tool-calling conversation is {unknown}; give --scenarios DIR",
        file=sys.stderr,
        flush=True,
    )


def _profile(args: argparse.Namespace) -> SimProfile | None:
    """``--profile`` with ``--fault-rate``/``--fault-scenario`` applied; None after
    printing the one-line error of a bad one."""
    from harness.sim.profiles import get_profile

    try:
        profile = get_profile(args.profile)
    except KeyError as exc:
        print(f"error: --profile: {exc}", file=sys.stderr)
        return None
    if args.fault_rate is None and not args.fault_scenario:
        return profile
    if not profile.faults:
        print(
            f"error: --fault-rate/--fault-scenario: profile {profile.name!r} injects no "
            "fault (choose one with faults, e.g. --profile repeat-loop)",
            file=sys.stderr,
        )
        return None
    return profile.with_faults(args.fault_rate, args.fault_scenario)


def run(args: argparse.Namespace) -> int:
    """``harness sim``: serve the reference server with a fault profile until stopped; the exit
    code."""
    from harness.sim import moe
    from harness.sim.server import make_server

    if args.list_profiles:
        return _list_profiles()
    profile = _profile(args)
    if profile is None:
        return ExitCode.USAGE_ERROR
    capture = bool(args.enable_return_routed_experts)
    lines = moe.boot_log_lines(
        profile, capture=capture, flavour=args.server_flavour, moe_model=args.moe_model
    )
    for line in lines:
        print(line, flush=True)
    crash = moe.crash_traceback(profile, capture=capture)
    if crash:
        print(crash, file=sys.stderr, flush=True)
        return ExitCode.REGRESSION

    args.scenarios = args.scenarios or default_scenarios()

    def announce(port: int) -> None:
        print(f"Serving on http://{args.host}:{port}", flush=True)

    server = make_server(
        profile,
        host=args.host,
        port=args.port,
        scenarios_dir=args.scenarios,
        gsm8k_path=args.gsm8k,
        gsm8k_faults=dict(args.gsm8k_fault),
        latency_ms=args.latency_ms,
        seed=args.seed,
        capture=capture,
        refuse_unknown=not args.play_unknown,
        server_info_api_key=args.server_info_api_key,
        flavour=args.server_flavour,
        chat_template=args.chat_template,
        moe_model=args.moe_model,
        on_started=announce,
    )
    app: Any = server.config.app  # the Starlette app of create_app
    _say_scenarios(args.scenarios, len(app.state.sim.index), args.play_unknown)
    server.run()
    if not server.started:
        print(f"error: --host/--port: could not serve on {args.host}:{args.port}", file=sys.stderr)
        return ExitCode.USAGE_ERROR
    return ExitCode.OK
