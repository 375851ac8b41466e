"""Benchmark 3: GSM8K-500 through ``harness gsm8k`` against a plain threaded client.

Both ask the first 500 test questions (5-shot completions prompts, SGLang's format) at
the same parallelism (64) of one ``harness sim --gsm8k ... --latency-ms 200`` process:

- harness: :func:`harness.gsm8k.run.run_gsm8k` (the same thread pool of blocking ``httpx``
  clients, plus retries, three answer extractions, records written to disk);
- plain: the way SGLang's few-shot GSM8K benchmark sends requests: a
  ``ThreadPoolExecutor`` of ``parallel`` threads, one blocking HTTP client per thread
  (here ``httpx.Client``; SGLang's ``RuntimeEndpoint`` uses ``requests``), answer
  extracted with the same last-integer rule.

Target: the harness not slower: wall ratio <= 1.0 within the measured run-to-run spread
of the plain client itself (about +-4% here), so <= 1.05 passes.
"""

from __future__ import annotations

import ssl
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

from bench.common import GSM8K, Row, clocks, sim_process
from harness.gsm8k.data import GSM8K_STOP, load_jsonl, question_prompt
from harness.gsm8k.extract import extract_sglang
from harness.gsm8k.run import run_gsm8k

TARGET_RATIO = 1.0
#: run-to-run spread of the plain threaded client on this 2-core machine (+-4%)
NOISE = 1.05


def plain_threaded(url: str, data: Path, n: int, parallel: int, shots: int = 5) -> float:
    """Ask the first ``n`` questions with a thread pool; returns the accuracy."""
    qs = load_jsonl(data)
    local = threading.local()
    tls = ssl.create_default_context()  # once: `requests` builds none for plain http either

    def ask(i: int) -> bool:
        if not hasattr(local, "client"):
            local.client = httpx.Client(timeout=300, verify=tls)
        body = {"model": "default", "prompt": question_prompt(qs, shots, i), "max_tokens": 512,
                "temperature": 0, "stop": list(GSM8K_STOP)}  # fmt: skip
        resp = local.client.post(url + "/v1/completions", json=body)
        text = resp.json()["choices"][0]["text"]
        return extract_sglang(text) == qs[i].label

    with ThreadPoolExecutor(parallel) as pool:
        correct = sum(pool.map(ask, range(min(n, len(qs)))))
    return correct / min(n, len(qs))


def run(n: int = 500, parallel: int = 64, latency_ms: float = 200, rounds: int = 2) -> list[Row]:
    """Run harness and plain ``rounds`` times each (the first to go alternates by round);
    the best round of each is compared."""
    if not GSM8K.exists():
        raise FileNotFoundError(f"{GSM8K}: GSM8K test split not found (set $BENCH_GSM8K)")
    h, p, acc = [], [], []
    with (
        sim_process(latency_ms=latency_ms, gsm8k=GSM8K) as url,
        tempfile.TemporaryDirectory() as tmp,
    ):
        for i in range(rounds):
            if i % 2:  # alternate which client goes first: neither always meets a cold server
                with clocks() as pc:
                    plain_acc = plain_threaded(url, GSM8K, n, parallel)
            with clocks() as hc:
                s = run_gsm8k(url, data=GSM8K, num_questions=n, parallel=parallel,
                              results=tmp, run_id=f"r{i}")  # fmt: skip
            if not i % 2:
                with clocks() as pc:
                    plain_acc = plain_threaded(url, GSM8K, n, parallel)
            h.append(hc)
            p.append(pc)
            acc.append((s.sides[0].accuracy, plain_acc))
    hw, pw = min(c["wall_s"] for c in h), min(c["wall_s"] for c in p)
    ratio = hw / pw
    return [
        Row(
            benchmark=f"3. GSM8K-{n}, parallel {parallel}, {latency_ms:.0f} ms/request",
            measured=round(hw, 2),
            target=round(pw * TARGET_RATIO, 2),
            unit="s wall",
            ratio=round(ratio, 2),
            passed=ratio <= TARGET_RATIO * NOISE,
            note=(
                f"plain threaded client {pw:.2f} s; {n / hw:.0f} vs {n / pw:.0f} questions/s; "
                f"CPU harness {min(c['cpu_s'] for c in h):.1f} s, "
                f"plain {min(c['cpu_s'] for c in p):.1f} s"
            ),
            details={
                "harness": [{k: round(v, 3) for k, v in c.items()} for c in h],
                "plain": [{k: round(v, 3) for k, v in c.items()} for c in p],
                "accuracy_harness_plain": acc,
            },
        )
    ]
