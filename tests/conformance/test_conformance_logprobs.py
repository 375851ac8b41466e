"""Conformance of the numerics adapters with the released servers.

Two kinds of tests, over real sockets on 127.0.0.1:

- **replay**: a fixture of ``tests/conformance/fixtures/<server>-<version>/`` (the request
  an adapter sends and the answer that version's code gives, each citing its source file)
  is served as recorded by a canned HTTP server; the adapter must read it right (a
  ``null`` from SGLang's orjson is a NaN, vLLM's refusal to encode a NaN is a NaN, an
  above-limit top-k is asked again at the limit, text-keyed rows that lost entries are
  noted);
- **flavour**: the reference server playing that version (``harness sim
  --server-flavour``) must answer in the fixture's shape, and a comparison through it
  must reach the verdict the real server's encoding calls for (a NaN in a kernel is a
  NaN finding on both real encodings; the model's own chat template is scored).
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from harness.errors import LogprobsError
from harness.numerics.adapters import (
    EchoAdapter,
    GreedyAdapter,
    SGLangAdapter,
    VLLMAdapter,
    bounded_request,
    chatml,
)
from harness.numerics.models import Sequence
from harness.numerics.run import LogprobsOptions, compare_logprobs
from harness.numerics.sequences import from_scenario
from harness.scenario.model import load_scenarios
from harness.sim.logprobs import tokenize
from harness.sim.server import serve_in_thread
from harness.sim.templates import TEMPLATES, render

FIXTURES = Path(__file__).parent / "fixtures"


def fixture(name: str) -> dict[str, Any]:
    return json.loads((FIXTURES / name).read_text())  # type: ignore[no-any-return]


CONV = fixture("sglang-0.5.23/tokenize_messages.json")["request"]["body"]["messages"]
SEQ = Sequence(id="conv", source="scenario", messages=tuple(CONV))


# ---------------------------------------------------------------- a canned server


@contextmanager
def dynamic(
    routes: dict[str, Callable[[dict[str, Any]], tuple[int, Any]]],
    *,
    slow_headers_s: float = 0,
    seen: list[tuple[str, Any]] | None = None,
) -> Iterator[str]:
    """An HTTP server on 127.0.0.1 answering POST ``path`` with ``routes[path](body)``,
    a ``(status, body)`` (a string body is sent as it is); other paths 404. With
    ``slow_headers_s``, it sends its status line one byte at a time, that many seconds
    apart. Each request is appended to ``seen`` as ``(path, body)``. Yields the base URL."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802
            n = int(self.headers.get("content-length") or 0)
            body = json.loads(self.rfile.read(n) or b"null")
            if seen is not None:
                seen.append((self.path, body))
            fn = routes.get(self.path)
            status, out = fn(body) if fn else (404, {"detail": "Not Found"})
            data = (out if isinstance(out, str) else json.dumps(out)).encode()
            if slow_headers_s:
                for b in f"HTTP/1.1 {status} X\r\n".encode():
                    self.wfile.write(bytes([b]))
                    self.wfile.flush()
                    time.sleep(slow_headers_s)
            else:
                self.send_response_only(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@contextmanager
def canned(
    answers: dict[str, list[tuple[int, Any]]], *, slow_headers_s: float = 0
) -> Iterator[str]:
    """:func:`dynamic` answering POST ``path`` with the next ``(status, body)`` of
    ``answers[path]`` (the last one repeats); ``canned.seen`` lists ``(path, body)``."""

    def next_of(queue: list[tuple[int, Any]]) -> Callable[[dict[str, Any]], tuple[int, Any]]:
        return lambda body: queue.pop(0) if len(queue) > 1 else queue[0]

    seen: list[tuple[str, Any]] = []
    routes = {path: next_of(queue) for path, queue in answers.items()}
    with dynamic(routes, slow_headers_s=slow_headers_s, seen=seen) as url:
        canned.seen = seen  # type: ignore[attr-defined]
        yield url


def replay(*names: str) -> dict[str, list[tuple[int, Any]]]:
    """The fixtures' answers by path, in order."""
    out: dict[str, list[tuple[int, Any]]] = {}
    for name in names:
        fx = fixture(name)
        out.setdefault(fx["request"]["path"], []).append(
            (fx["response"]["status"], fx["response"]["body"])
        )
    return out


def adapter(cls: type, url: str, *, top_k: int = 2, timeout: float = 10.0) -> Any:
    return cls(httpx.Client(timeout=timeout), url, model=None, top_k=top_k)


# ---------------------------------------------------------------- replay: SGLang


def test_sglang_0_5_23_scores_the_servers_template_as_input_ids() -> None:
    """SGLang 0.5.23: the conversation goes to /tokenize as messages, then /generate as
    input_ids (today's main sent ChatML text to /generate)."""
    answers = replay(
        "sglang-0.5.23/tokenize_messages.json", "sglang-0.5.23/generate_logprobs_nonfinite.json"
    )
    with canned(answers) as url:
        scored = adapter(SGLangAdapter, url).score(SEQ)
        seen = canned.seen  # type: ignore[attr-defined]
    assert [p for p, _ in seen] == ["/tokenize", "/generate"]
    assert seen[0][1]["messages"] == CONV and seen[0][1]["add_generation_prompt"] is False
    assert "text" not in seen[1][1]
    assert (
        seen[1][1]["input_ids"]
        == fixture("sglang-0.5.23/tokenize_messages.json")["response"]["body"]["tokens"]
    )
    assert scored.requests == 2


def test_sglang_null_logprob_is_nan_not_truncation() -> None:
    """orjson writes a NaN as null: position 3 is a NaN finding (today's main: 'has no
    logprob (truncated)')."""
    answers = replay(
        "sglang-0.5.23/tokenize_messages.json", "sglang-0.5.23/generate_logprobs_nonfinite.json"
    )
    with canned(answers) as url:
        scored = adapter(SGLangAdapter, url).score(SEQ)
    assert scored.logprobs[0] is None
    assert math.isnan(scored.logprobs[3])  # type: ignore[arg-type]
    assert scored.nonfinite() == 1
    assert scored.logprobs[1] == -3.1


def test_sglang_0_5_10_cannot_render_so_chatml_is_said_once() -> None:
    """SGLang 0.5.10's /tokenize takes a prompt only: ChatML text, and one note."""
    answers = replay(
        "sglang-0.5.10.post1/tokenize_messages.json",
        "sglang-0.5.10.post1/generate_logprobs_nonfinite.json",
    )
    with canned(answers) as url:
        a = adapter(SGLangAdapter, url)
        a.score(SEQ)
        a.score(Sequence(id="second", source="scenario", messages=tuple(CONV[:2])))
        seen = canned.seen  # type: ignore[attr-defined]
    assert [p for p, _ in seen] == ["/tokenize", "/generate", "/generate"]  # asked once
    assert seen[1][1]["text"].startswith(chatml(CONV)[:20])
    assert len(a.notes) == 1 and "scored as ChatML" in a.notes[0] and "0.5.23" in a.notes[0]


# ---------------------------------------------------------------- replay: vLLM


def test_vllm_minus_9999_is_minus_inf() -> None:
    answers = replay(
        "vllm-0.33/tokenize_messages.json", "vllm-0.33/completions_prompt_logprobs.json"
    )
    with canned(answers) as url:
        scored = adapter(VLLMAdapter, url).score(Sequence(id="s", source="t", text="x"))
    assert scored.logprobs[3] == -math.inf and scored.nonfinite() == 1


def test_vllm_refusal_to_encode_nan_is_a_nan_finding() -> None:
    """vLLM answers a NaN with HTTP 400 'Out of range float values are not JSON
    compliant': the adapter bisects to the first position it cannot send and marks NaN
    from there (today's main: an infrastructure error)."""
    ok = fixture("vllm-0.33/completions_prompt_logprobs.json")["response"]["body"]
    nan = fixture("vllm-0.33/prompt_logprobs_nonfinite.json")["response"]
    tok = fixture("vllm-0.33/tokenize_messages.json")["response"]["body"]

    # prefixes of up to 3 tokens can be sent, from 4 on the NaN at position 3 cannot
    def answer(body: dict[str, Any]) -> tuple[int, Any]:
        n = len(body["prompt"])
        if n >= 4:
            return nan["status"], nan["body"]
        out = json.loads(json.dumps(ok))
        out["choices"][0]["prompt_logprobs"] = ok["choices"][0]["prompt_logprobs"][:n]
        return 200, out

    ids = [151644, 872, 198, 12012, 220, 18]
    with dynamic(
        {
            "/tokenize": lambda b: (200, {**tok, "tokens": ids, "count": 6}),
            "/v1/completions": answer,
        }
    ) as url:
        a = adapter(VLLMAdapter, url)
        scored = a.score(SEQ)
    assert len(scored) == 4 and scored.unreadable_from == 4  # compared up to position 3
    assert scored.logprobs[1] == -3.1 and scored.logprobs[2] == -0.02
    assert math.isnan(scored.logprobs[3])  # type: ignore[arg-type]
    assert scored.nonfinite() == 1  # one finding, not one per unreadable position
    assert len(a.notes) == 1 and "position 3" in a.notes[0] and "not JSON compliant" in a.notes[0]


def test_a_bare_http_500_is_an_infrastructure_error_not_nan() -> None:
    """Only the JSON encoder's refusal is read as a NaN; a server that fails with a bare
    HTTP 500 on long prompts is an infrastructure error."""
    tok = fixture("vllm-0.33/tokenize_messages.json")["response"]["body"]
    with (
        dynamic(
            {
                "/tokenize": lambda b: (200, tok),
                "/v1/completions": lambda b: (500, "Internal Server Error"),
            }
        ) as url,
        pytest.raises(LogprobsError, match="HTTP 500"),
    ):
        adapter(VLLMAdapter, url).score(SEQ)


def test_vllm_top_k_above_max_logprobs_is_capped_with_a_note() -> None:
    over = fixture("vllm-0.33/prompt_logprobs_above_max.json")["response"]
    ok = fixture("vllm-0.33/completions_prompt_logprobs.json")["response"]["body"]
    tok = fixture("vllm-0.33/tokenize_messages.json")["response"]["body"]

    def answer(body: dict[str, Any]) -> tuple[int, Any]:
        if body["prompt_logprobs"] > 20:
            return over["status"], over["body"]
        return 200, ok

    with dynamic(
        {
            "/tokenize": lambda b: (200, {**tok, "tokens": [1, 872, 198, 12012], "count": 4}),
            "/v1/completions": answer,
        }
    ) as url:
        a = adapter(VLLMAdapter, url, top_k=32)
        a.score(SEQ)
    assert a.top_k == 20
    assert len(a.notes) == 1 and "--max-logprobs" in a.notes[0] and "top 20" in a.notes[0]


# ---------------------------------------------------------------- replay: echo


def test_echo_rows_that_lost_entries_are_noted_not_compared() -> None:
    """Two ids decoding alike share one key in the text-keyed shape: that row is
    compared by the prompt token's logprob only, with a note (today's main: merged
    silently, a low KL)."""
    with canned(replay("llama-cpp-python-0.3.36/completions_echo_merged.json")) as url:
        a = adapter(EchoAdapter, url)
        scored = a.score(Sequence(id="t", source="t", text="Say the word"))
    assert scored.top[1] == {" the": -2.0, " a": -1.1}
    assert scored.top[2] == {" word": -1.5}
    assert len(a.notes) == 1 and "1 top-k rows" in a.notes[0]


# ---------------------------------------------------------------- malformed answers


@pytest.mark.parametrize(
    ("entry", "match"),
    [
        (800.0, "impossible log-probability"),
        (1e308, "impossible log-probability"),
        (5, "impossible log-probability"),
        ("x", "not a number"),
    ],
)
def test_impossible_logprobs_are_malformed_and_name_the_server(entry: Any, match: str) -> None:
    body = fixture("sglang-0.5.23/generate_logprobs_nonfinite.json")["response"]["body"]
    body["meta_info"]["input_token_logprobs"][2][0] = entry
    with (
        canned({"/generate": [(200, body)]}) as url,
        pytest.raises(LogprobsError, match=match) as err,
    ):
        adapter(SGLangAdapter, url).score(Sequence(id="t", source="t", text="x"))
    assert url in str(err.value)


def test_top_k_of_impossible_mass_and_of_wrong_type_are_malformed() -> None:
    body = fixture("sglang-0.5.23/generate_logprobs_nonfinite.json")["response"]["body"]
    body["meta_info"]["input_top_logprobs"][1] = [[0.0, i, "t"] for i in range(5)]
    with (
        canned({"/generate": [(200, body)]}) as url,
        pytest.raises(LogprobsError, match="sums to probability 5"),
    ):
        adapter(SGLangAdapter, url).score(Sequence(id="t", source="t", text="x"))
    body = fixture("sglang-0.5.23/generate_logprobs_nonfinite.json")["response"]["body"]
    body["meta_info"]["input_top_logprobs"][3] = 5
    with (
        canned({"/generate": [(200, body)]}) as url,
        pytest.raises(LogprobsError, match=r"input_top_logprobs\[3\] is 5, not a list"),
    ):
        adapter(SGLangAdapter, url).score(Sequence(id="t", source="t", text="x"))


def test_slow_headers_cannot_escape_the_deadline() -> None:
    """Headers sent a byte at a time (today's main: the deadline covered the body only)."""
    with canned({"/x": [(200, {})]}, slow_headers_s=0.3) as url:
        start = time.monotonic()
        with pytest.raises(httpx.TimeoutException, match="headers included"):
            bounded_request(httpx.Client(timeout=1.0), "POST", url + "/x", json={})
        assert time.monotonic() - start < 3


# ---------------------------------------------------------------- flavours


def shape(v: Any) -> Any:
    """A JSON value's shape: the keys of objects (recursively), the type of scalars (a
    ``null`` and a float are both a number slot), the first element of lists."""
    if isinstance(v, dict):
        return {k: shape(x) for k, x in v.items() if k not in ("id",)}
    if isinstance(v, list):
        return [shape(v[1] if len(v) > 1 and v[0] is None else v[0])] if v else []
    if v is None or isinstance(v, float):
        return "number"
    return type(v).__name__


@pytest.mark.parametrize(
    ("flavour", "name", "pick"),
    [
        ("sglang-0.5.23", "sglang-0.5.23/tokenize_messages.json", lambda b: b),
        ("vllm-0.33", "vllm-0.33/tokenize_messages.json", lambda b: b),
        ("sglang-0.5.10.post1", "sglang-0.5.10.post1/tokenize_messages.json", None),
        ("vllm-0.33", "vllm-0.33/prompt_logprobs_above_max.json", None),
    ],
)
def test_flavour_answers_in_the_fixtures_shape(flavour: str, name: str, pick: Any) -> None:
    fx = fixture(name)
    with serve_in_thread("healthy", scenarios_dir=None, flavour=flavour) as url:
        r = httpx.post(url + fx["request"]["path"], json=fx["request"]["body"], timeout=10)
    assert r.status_code == fx["response"]["status"], r.text
    if pick is not None:
        assert shape(r.json()) == shape(fx["response"]["body"])
    elif flavour.startswith("vllm"):
        assert r.json()["error"]["message"] == fx["response"]["body"]["error"]["message"]
    else:
        assert "prompt" in r.text and "Field required" in r.text


def test_sglang_flavour_generate_matches_the_fixtures_shape() -> None:
    fx = fixture("sglang-0.5.23/generate_logprobs_nonfinite.json")
    with serve_in_thread("healthy", scenarios_dir=None, flavour="sglang-0.5.23") as url:
        got = httpx.post(url + "/generate", json=fx["request"]["body"], timeout=10).json()
    want = fx["response"]["body"]["meta_info"]
    for key in ("input_token_logprobs", "input_top_logprobs", "prompt_tokens"):
        assert shape(got["meta_info"][key]) == shape(want[key]), key


@pytest.mark.parametrize("flavour", ["sglang-0.5.23", "vllm-0.33", "reference"])
def test_nan_in_a_kernel_reaches_the_verdict_on_each_real_encoding(flavour: str) -> None:
    """The reference server's NaN profile, played with each server's encoding (SGLang:
    null; vLLM: HTTP 400 'not JSON compliant'): a REGRESSION naming NaN/infinite
    logprobs, never an infrastructure error."""
    seqs = [from_scenario(s) for s in load_scenarios(["scenarios"])][:10]
    with (
        serve_in_thread("healthy", scenarios_dir=None, flavour=flavour) as base,
        serve_in_thread("logprobs-nan", scenarios_dir=None, flavour=flavour) as cand,
    ):
        res = compare_logprobs(seqs, base, cand)
    assert res.verdict == "REGRESSION", res.message
    assert "NaN/infinite" in res.message
    assert sum(r.ab.nonfinite["candidate"] for r in res.sequences) > 0
    assert all(r.ab.nonfinite["baseline"] == 0 for r in res.sequences)


@pytest.mark.parametrize("template", ["llama3", "deepseek-v3", "minimax-m2"])
def test_sglang_adapter_scores_the_models_own_template(template: str) -> None:
    """The tokens scored are the server's rendering of the model's template (today's
    main: ChatML whatever the model)."""
    with serve_in_thread(
        "healthy", scenarios_dir=None, flavour="sglang-0.5.23", chat_template=template
    ) as url:
        a = adapter(SGLangAdapter, url, top_k=5)
        scored = a.score(SEQ)
    want = [str(i) for i in tokenize(render(template, CONV, add_generation_prompt=False))]
    assert scored.keys == want
    assert scored.keys != [str(i) for i in tokenize(chatml(CONV))]
    assert not a.notes


def test_echo_adapter_uses_apply_template_where_the_server_has_it() -> None:
    with serve_in_thread("healthy", scenarios_dir=None, chat_template="llama3") as url:
        a = adapter(EchoAdapter, url, top_k=5)
        scored = a.score(SEQ)
    assert scored.keys[0] == "<|begin_of_text|>"
    assert not a.notes


def test_mixed_pair_each_side_scored_with_its_own_api() -> None:
    """A vLLM baseline against an SGLang candidate: each side detected on its own, the
    same tokens scored (today's main sent prompt_logprobs to SGLang)."""
    seqs = [SEQ, *(from_scenario(s) for s in load_scenarios(["scenarios"])[:8])]
    with (
        serve_in_thread(
            "healthy", scenarios_dir=None, flavour="vllm-0.33", chat_template="deepseek-v3"
        ) as base,
        serve_in_thread(
            "healthy", scenarios_dir=None, flavour="sglang-0.5.23", chat_template="deepseek-v3"
        ) as cand,
    ):
        res = compare_logprobs(seqs, base, cand)
    assert (res.baseline["api"], res.candidate["api"]) == ("vllm", "sglang")
    assert res.verdict == "NO CHANGE", res.message


def test_top_k_above_the_vllm_flavours_limit_is_capped_end_to_end() -> None:
    with (
        serve_in_thread("healthy", scenarios_dir=None, flavour="vllm-0.33") as base,
        serve_in_thread("healthy", scenarios_dir=None, flavour="vllm-0.33") as cand,
    ):
        seqs = [SEQ, *(from_scenario(s) for s in load_scenarios(["scenarios"])[:8])]
        res = compare_logprobs(seqs, base, cand, LogprobsOptions(top_k=32))
    assert res.verdict == "NO CHANGE"
    assert any("--max-logprobs" in n for n in res.notes)


def test_every_template_renders_every_role() -> None:
    for name in TEMPLATES:
        text = render(name, CONV, add_generation_prompt=False)
        assert "Convert 3 km" in text and "1.864" in text and "convert" in text, name


def test_greedy_adapter_sends_string_content_as_llama_server_requires() -> None:
    """llama-server parses chat messages strictly: an assistant turn that only calls tools
    (``content: null``) gets HTTP 500 "type must be string, but is null" (upstream
    ``tools/server/utils.hpp``); the adapter sends ``""`` (today's main: every
    conversation with a tool call failed)."""
    entry = {"token": "Hi", "logprob": -0.1, "bytes": [72, 105], "top_logprobs": []}

    def answer(body: dict[str, Any]) -> tuple[int, Any]:
        if any(m.get("content") is None for m in body["messages"]):
            msg = "Failed to parse messages: [json.exception.type_error.302] type must be string, but is null"
            return 500, {"error": {"code": 500, "message": msg, "type": "server_error"}}
        choice = {"index": 0, "message": {"role": "assistant", "content": "Hi"},
                  "logprobs": {"content": [entry]}, "finish_reason": "stop"}  # fmt: skip
        return 200, {"choices": [choice]}

    with dynamic({"/v1/chat/completions": answer}) as url:
        scored = adapter(GreedyAdapter, url).score(SEQ)
    assert scored.keys == ["<prompt>", "Hi"]


def test_sglang_0_5_23_non_jinja_encoding_keeps_the_models_format() -> None:
    """SGLang 0.5.23 refuses add_generation_prompt for a chat encoding (DeepSeek V3.2,
    Kimi K3): asked again without it, the model's format is scored (with its generation
    prompt at the end) and said once; never ChatML."""
    with serve_in_thread(
        "healthy", scenarios_dir=None, flavour="sglang-0.5.23", chat_template="deepseek-v3.2"
    ) as url:
        a = adapter(SGLangAdapter, url, top_k=5)
        scored = a.score(SEQ)
    want = tokenize(render("deepseek-v3.2", CONV, add_generation_prompt=True))
    assert scored.keys == [str(i) for i in want]
    assert len(a.notes) == 1 and "not a Jinja template" in a.notes[0]
    assert not any("ChatML" in n for n in a.notes)


def test_a_template_error_is_raised_not_scored_as_chatml() -> None:
    """Any other refusal of /tokenize (the model's template failing) is the server's own
    message, not a reason to score another format."""
    err = {"object": "error", "message": "TemplateError: tool role not supported", "code": 400}
    with (
        dynamic({"/tokenize": lambda b: (400, err)}) as url,
        pytest.raises(LogprobsError, match="tool role not supported"),
    ):
        adapter(SGLangAdapter, url).score(SEQ)


def test_a_null_in_a_top_k_row_is_nan_not_minus_inf() -> None:
    body = fixture("sglang-0.5.23/generate_logprobs_nonfinite.json")["response"]["body"]
    body["meta_info"]["input_top_logprobs"][4][0][0] = None  # orjson's NaN
    with canned({"/generate": [(200, body)]}) as url:
        scored = adapter(SGLangAdapter, url).score(Sequence(id="t", source="t", text="x"))
    assert math.isnan(scored.top[4]["18"])
    assert scored.nonfinite() == 2  # position 3 (forced token) and position 4 (its top-k)


def test_incomparable_sides_fall_back_to_greedy_on_both(sim_url: Callable[..., str]) -> None:
    """A text-keyed (echo) baseline against an id-keyed (vLLM) candidate cannot be compared
    position by position: each API is tried on the other side with a probe, then greedy on
    both (today's main: the baseline's API was sent to the candidate)."""
    seqs = [SEQ, *(from_scenario(s) for s in load_scenarios(["scenarios"])[:8])]
    base, cand = sim_url("healthy"), sim_url("healthy", flavour="vllm-0.33")
    res = compare_logprobs(seqs, base, cand, LogprobsOptions(api="llama-cpp"))
    assert res.candidate["api"] == "llama-cpp"  # vLLM answers echo too: one API on both
    from harness.numerics.run import _common_ground  # the fallback itself, driven directly

    with httpx.Client(timeout=10) as client:
        b = EchoAdapter(client, base, model=None, top_k=5)
        c = VLLMAdapter(client, cand, model=None, top_k=5)

        def make(name: str, url: str) -> Any:
            from harness.numerics.adapters import make_adapter

            return make_adapter(name, client, url, model=None, top_k=5)

        pb, pc = _common_ground(b, c, make)
    assert pb.name == pc.name and "cannot be compared position by position" in pb.notes[0]


def test_mixed_pair_with_sglang_0_5_10_names_the_chatml_fallback(
    sim_url: Callable[..., str],
) -> None:
    """vLLM renders the model's template, SGLang 0.5.10 cannot: the tokens differ, and the
    refusal says why (the ChatML note), not only 'compare servers that share a tokenizer'."""
    from harness.errors import TokenizationMismatch

    base = sim_url("healthy", flavour="vllm-0.33", chat_template="llama3")
    cand = sim_url("healthy", flavour="sglang-0.5.10.post1", chat_template="llama3")
    with pytest.raises(TokenizationMismatch, match="scored as ChatML"):
        compare_logprobs([SEQ], base, cand)


def test_settings_and_requests_say_what_was_done(sim_url: Callable[..., str]) -> None:
    seqs = [SEQ, *(from_scenario(s) for s in load_scenarios(["scenarios"])[:8])]
    vllm = sim_url("healthy", flavour="vllm-0.33")
    res = compare_logprobs(seqs, vllm, vllm, LogprobsOptions(top_k=32))
    assert res.settings["top_k"] == 20  # what was scored, not what was asked
    # per sequence: /tokenize + prompt_logprobs (A/B), prompt_logprobs (A/A), and the
    # refused first request at top-32 is counted
    assert res.requests["baseline"] + res.requests["candidate"] >= 3 * len(seqs) + 1
