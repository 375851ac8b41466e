"""Routed experts, A against B: which experts each token was routed to, on both servers.

SGLang returns the routed experts of every token and layer (``--enable-return-routed-experts``,
request field ``return_routed_experts``; formats: :mod:`harness.server.experts`). Given
the same tokens, a healthy candidate routes as the baseline does: per layer, the share of
tokens whose top-k sets agree is the baseline's own (the A/A floor: the baseline asked
twice; 100% for deterministic routing). The seed bug of this project, SGLang's shared
experts fusion on AMD, dropped a routed expert per token and wrote the shared expert's id
(``n_routed_experts``, out of the routed range) into a routed column: every token of every
MoE layer parts.

- :func:`compare_routing` (pure): decoded arrays -> :class:`ExpertsComparison` (agreement
  per layer, the first parting, the shared id on either side, the verdict and its name).
- :func:`compare_experts`: asks the two servers (``POST /generate`` with ``input_ids``,
  ``max_new_tokens: 1``, ``return_routed_experts: true``) over the numerics section's
  sequences and compares. None, with one note, when a side returns no routed experts.

The verdict rule (exact, over counts): on layer ``l`` with ``T`` compared tokens,
``ab_agree[l]`` tokens whose candidate top-k equals the baseline's and ``aa_agree[l]``
whose second baseline answer equals the first; the layer regressed iff ``ab_agree[l] <
aa_agree[l] - floor(margin * T)`` (``margin`` 0 by default: any token below the floor).
REGRESSION iff some layer regressed; NO CHANGE otherwise; INCONCLUSIVE when no token
was compared. Two rows agree when their ids, sorted, are equal (a multiset: a duplicated
id is a difference).
"""

from __future__ import annotations

import math
from collections.abc import Sequence as Seq
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

if TYPE_CHECKING:
    import httpx

    from harness.numerics.adapters import Adapter
    from harness.numerics.models import Sequence
    from harness.numerics.run import LogprobsOptions
    from harness.server.experts import MoeShape

__all__ = [
    "ExpertsComparison",
    "ExpertsParting",
    "LayerAgreement",
    "RecordedExperts",
    "RecordedRouting",
    "compare_experts",
    "compare_recorded_experts",
    "compare_routing",
    "pack",
    "record_experts",
    "returns_experts",
    "unpack",
]

Verdict = Literal["REGRESSION", "NO CHANGE", "INCONCLUSIVE"]
_WORDS = ("no", "one", "two", "three", "four", "five", "six", "seven", "eight")
_ENABLE = "start it with --enable-return-routed-experts (SGLang)"
_NO_GENERATE = " (no SGLang /generate: vLLM returns routed experts per choice of its OpenAI endpoints, not asked here)"


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class LayerAgreement(_Model):
    """One layer: ``tokens`` compared; ``ab_agree``/``aa_agree``: tokens whose top-k set
    agrees A/B (baseline vs candidate) and A/A (baseline vs itself); ``ab_share``/
    ``aa_share``: the same as shares in [0, 1] (None with no token); ``shared_baseline``/
    ``shared_candidate``: tokens whose row holds the shared expert's id on that side;
    ``dense``: a layer without routing (all zeros on a healthy server)."""

    layer: int
    tokens: int
    ab_agree: int
    aa_agree: int
    ab_share: float | None
    aa_share: float | None
    regressed: bool = False
    shared_baseline: int = 0
    shared_candidate: int = 0
    dense: bool = False


class ExpertsParting(_Model):
    """Where two answers first part: sequence, token position (0-based, in the sequence),
    layer, and both sides' ids at that row."""

    sequence: str
    token: int
    layer: int
    baseline: list[int]
    candidate: list[int]

    def line(self) -> str:
        """The parting in one line: sequence, token, layer and both sides' expert ids."""
        return (
            f"{self.sequence} token {self.token}, layer {self.layer}: "
            f"{self.baseline} vs {self.candidate}"
        )


class ExpertsComparison(_Model):
    """The routed experts of the same tokens on baseline and candidate (``logprobs.json``
    ``experts``).

    Shapes: each side answered ``[rows, num_layers, top_k]`` expert ids per sequence (row
    ``i``: the token at position ``i``); ``tokens``: rows compared, summed over
    ``sequences``; ``layers``: one :class:`LayerAgreement` per layer (shares in [0, 1],
    pooled over every compared token). ``num_routed_experts``: the routed experts' count,
    so the shared expert's id (None: unknown). ``first_parting``/``aa_first_parting``:
    the first (sequence, token, layer) where A/B (A/A) part. ``shared_in``: the sides
    whose routed columns hold the shared id. ``pattern``: the fault's name when the data
    shows one (``"one routed expert replaced by the shared expert's id on every token of
    3 MoE layers (1, 2, 3)"``). ``rule``: the decision rule, stated.
    """

    sequences: int
    tokens: int
    num_layers: int
    top_k: int
    num_routed_experts: int | None = None
    layers: list[LayerAgreement] = Field(default_factory=list)
    first_parting: ExpertsParting | None = None
    aa_first_parting: ExpertsParting | None = None
    shared_in: list[str] = Field(default_factory=list)
    regressed_layers: list[int] = Field(default_factory=list)
    pattern: str | None = None
    verdict: Verdict
    message: str
    margin: float = 0.0
    rule: str = ""
    notes: list[str] = Field(default_factory=list)

    def line(self) -> str:
        """One line: ``routed experts (N sequences, T tokens): <message>``."""
        return f"routed experts ({self.sequences} sequences, {self.tokens} tokens): {self.message}"


def _as_list(x: np.ndarray | Seq[np.ndarray]) -> list[np.ndarray]:
    return [np.asarray(x)] if isinstance(x, np.ndarray) else [np.asarray(a) for a in x]


def _agree(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``[rows, layers]`` bool: the rows' ids, sorted, are equal."""
    return np.asarray((np.sort(a, axis=2) == np.sort(b, axis=2)).all(axis=2))


def _first(agree: list[np.ndarray], a: list[np.ndarray], b: list[np.ndarray],
           names: list[str]) -> ExpertsParting | None:  # fmt: skip
    """The first (sequence, token, layer) where ``agree`` is False."""
    for name, ok, x, y in zip(names, agree, a, b, strict=True):
        bad = np.argwhere(~ok)
        if bad.size:
            t, layer = (int(v) for v in bad[0])  # argwhere is row-major: token, then layer
            return ExpertsParting(
                sequence=name, token=t, layer=layer,
                baseline=x[t, layer].tolist(), candidate=y[t, layer].tolist(),
            )  # fmt: skip
    return None


def _replaced(a: np.ndarray, c: np.ndarray, shared: int) -> np.ndarray:
    """``[rows, layers]``: how many of the baseline's experts the candidate row replaced by
    the shared id (``m >= 1`` where the row is exactly the baseline's with ``m`` columns
    turned to the shared id; 0 where it is not that pattern)."""
    on = c == shared
    kept_ok = ((c[..., :, None] == a[..., None, :]).any(axis=-1) | on).all(axis=-1)
    dropped = (~(a[..., :, None] == c[..., None, :]).any(axis=-1)).sum(axis=-1)
    count = on.sum(axis=-1)
    return np.where(kept_ok & (dropped == count), count, 0)


def _pattern(a: list[np.ndarray], c: list[np.ndarray], shared: int | None,
             regressed: list[int]) -> str | None:  # fmt: skip
    """The fault's name when every token of every regressed layer shows it: the baseline's
    row with ``m`` experts replaced by the shared id (one ``m`` throughout)."""
    if shared is None or not regressed:
        return None
    m = np.concatenate([_replaced(x, y, shared)[:, regressed] for x, y in zip(a, c, strict=True)])
    if m.size == 0 or (m == 0).any() or len(np.unique(m)) != 1:
        return None
    k = int(m.flat[0])
    what = f"{_WORDS[k] if k < len(_WORDS) else k} routed expert{'s' if k > 1 else ''}"
    n = len(regressed)
    layers = ", ".join(str(i) for i in regressed)
    return (
        f"{what} replaced by the shared expert's id ({shared}) on every token of {n} MoE "
        f"layer{'s' if n > 1 else ''} ({layers})"
    )


def _trim(a: list[np.ndarray], b: list[np.ndarray], c: list[np.ndarray],
          names: list[str]) -> tuple[list[np.ndarray], list[np.ndarray], list[np.ndarray], list[str]]:  # fmt: skip
    """Each sequence cut to the rows all three answers have (a note per cut one)."""
    notes = []
    out: tuple[list[np.ndarray], list[np.ndarray], list[np.ndarray]] = ([], [], [])
    for name, x, y, z in zip(names, a, b, c, strict=True):
        n = min(len(x), len(y), len(z))
        if len({len(x), len(y), len(z)}) > 1:
            notes.append(
                f"{name}: rows differ (baseline {len(x)}, again {len(y)}, candidate {len(z)}); first {n} compared"
            )
        for lst, arr in zip(out, (x, y, z), strict=True):
            lst.append(arr[:n])
    return *out, notes


def _holding(side: np.ndarray, shared: int | None) -> np.ndarray:
    """``[layers]``: tokens whose row holds the shared id (zeros when it is unknown)."""
    if shared is None:
        return np.zeros(side.shape[1], dtype=np.int64)
    return np.asarray((side == shared).any(axis=2).sum(axis=0))


def _layers(ab: list[np.ndarray], aa: list[np.ndarray], a: list[np.ndarray],
            c: list[np.ndarray], shared: int | None, dense: set[int],
            margin: float) -> list[LayerAgreement]:  # fmt: skip
    """Per layer, over every sequence's tokens: agreement counts and the rule's outcome."""
    ab_n, aa_n = np.concatenate(ab).sum(axis=0), np.concatenate(aa).sum(axis=0)
    a_all, c_all = np.concatenate(a), np.concatenate(c)
    tokens, slack = len(a_all), math.floor(margin * len(a_all))
    held_a, held_c = _holding(a_all, shared), _holding(c_all, shared)
    out = []
    for layer in range(a_all.shape[1]):
        abl, aal = int(ab_n[layer]), int(aa_n[layer])
        out.append(LayerAgreement(
            layer=layer, tokens=tokens, ab_agree=abl, aa_agree=aal,
            ab_share=abl / tokens if tokens else None, aa_share=aal / tokens if tokens else None,
            regressed=tokens > 0 and abl < aal - slack, shared_baseline=int(held_a[layer]),
            shared_candidate=int(held_c[layer]), dense=layer in dense,
        ))  # fmt: skip
    return out


def compare_routing(
    base_a: np.ndarray | Seq[np.ndarray],
    base_b: np.ndarray | Seq[np.ndarray],
    cand: np.ndarray | Seq[np.ndarray],
    *,
    num_routed_experts: int | None = None,
    dense_layers: Seq[int] = (),
    names: Seq[str] | None = None,
    margin: float = 0.0,
) -> ExpertsComparison:
    """Compare routed experts of the same tokens (pure).

    ``base_a``, ``base_b``: the baseline's two answers, ``cand``: the candidate's; each an
    int array ``[rows, num_layers, top_k]`` (one sequence) or a list of them (one per
    sequence, ``names`` naming them); a sequence whose answers differ in rows is cut to the
    shortest (noted). ``num_routed_experts``: the shared expert's id (out of the routed
    range ``[0, num_routed_experts)``); ``dense_layers``: marked as such. ``margin``: the
    share of tokens a layer's A/B agreement may fall below its A/A floor (module
    docstring: the rule).

    Raises:
        ValueError: no sequence, or arrays not 3-D with one (layers, top_k) throughout.
    """
    a, b, c = _as_list(base_a), _as_list(base_b), _as_list(cand)
    if not a or not (len(a) == len(b) == len(c)):
        raise ValueError(
            f"one answer per side per sequence expected, got {len(a)}, {len(b)}, {len(c)}"
        )
    dims = {x.shape[1:] for x in (*a, *b, *c) if x.ndim == 3}
    if len(dims) != 1 or any(x.ndim != 3 for x in (*a, *b, *c)):
        raise ValueError(
            f"arrays [rows, num_layers, top_k] of one geometry expected, got {sorted(dims)}"
        )
    names = list(names) if names is not None else [f"#{i}" for i in range(len(a))]
    a, b, c, notes = _trim(a, b, c, names)
    ab, aa = (
        [_agree(x, z) for x, z in zip(a, c, strict=True)],
        [_agree(x, y) for x, y in zip(a, b, strict=True)],
    )
    layers = _layers(ab, aa, a, c, num_routed_experts, set(dense_layers), margin)
    regressed = [lay.layer for lay in layers if lay.regressed]
    shared_in = [s for s, attr in (("baseline", "shared_baseline"), ("candidate", "shared_candidate"))
                 if any(getattr(lay, attr) for lay in layers)]  # fmt: skip
    num_layers, top_k = next(iter(dims))
    res = ExpertsComparison(
        sequences=len(a), tokens=layers[0].tokens if layers else 0, num_layers=num_layers,
        top_k=top_k, num_routed_experts=num_routed_experts, layers=layers,
        first_parting=_first(ab, a, c, names), aa_first_parting=_first(aa, a, b, names),
        shared_in=shared_in, regressed_layers=regressed,
        pattern=_pattern(a, c, num_routed_experts, regressed), verdict="INCONCLUSIVE", message="",
        margin=margin, rule=_rule(margin), notes=notes,
    )  # fmt: skip
    return _decide(res)


def _rule(margin: float) -> str:
    slack = "" if margin == 0 else f" - floor({margin:g} x tokens)"
    return (
        "REGRESSION iff on some layer the tokens whose top-k agree A/B are fewer than those "
        f"agreeing A/A{slack}; NO CHANGE otherwise"
    )


def _pct(x: float | None) -> str:
    return "–" if x is None else f"{100 * x:.1f}%"


def _decide(res: ExpertsComparison) -> ExpertsComparison:
    """The verdict and its one-line message (module docstring: the rule)."""
    if res.tokens == 0:
        return res.model_copy(update={"verdict": "INCONCLUSIVE", "message": "no token compared"})
    shared = (
        f"; the shared expert's id in the {' and '.join(res.shared_in)}'s routed columns"
        if res.shared_in
        else ""
    )
    if not res.regressed_layers:
        worst = min(res.layers, key=lambda lay: lay.ab_share or 0.0)
        msg = (
            f"NO CHANGE: A/B top-k agreement as A/A on every layer (lowest: layer {worst.layer} "
            f"{_pct(worst.ab_share)} vs A/A {_pct(worst.aa_share)}){shared}"
        )
        return res.model_copy(update={"verdict": "NO CHANGE", "message": msg})
    bad = [res.layers[i] for i in res.regressed_layers]
    where = ", ".join(
        f"{lay.layer} {_pct(lay.ab_share)} vs {_pct(lay.aa_share)}" for lay in bad[:8]
    )
    first = f"; first parts at {res.first_parting.line()}" if res.first_parting else ""
    head = (
        res.pattern
        or f"A/B top-k agreement below the A/A floor on {len(bad)} of {res.num_layers} layers"
    )
    msg = f"REGRESSION: {head} (layer A/B vs A/A: {where}){shared}{first}"
    return res.model_copy(update={"verdict": "REGRESSION", "message": msg})


# ------------------------------------------------------------------ asking the servers


def _request_ids(adapter: Adapter, seq: Sequence) -> tuple[str, Any]:
    """``("input_ids", ids)`` as the server's chat template renders ``seq`` (the numerics
    adapters' ``/tokenize``), else ``("text", text)`` (a plain prompt, or a server whose
    ``/tokenize`` renders no template: ChatML)."""
    if seq.messages is not None:
        ids = adapter._ids.get(seq.id) or adapter._template_ids(seq)
        if ids is not None:
            adapter._ids[seq.id] = ids
            return "input_ids", ids
    return "text", adapter._text(seq)


def _routing(adapter: Adapter, key: str, value: Any) -> np.ndarray | None:
    """One answer's routed experts as sent (SGLang: flat int32; vLLM-style ``.npy``: its
    shape), None when it has none.

    Raises:
        LogprobsError: HTTP error, non-JSON answer, or a payload that does not decode.
    """
    from harness.server.experts import decode_routed_experts_array

    body = {key: value, "sampling_params": {"max_new_tokens": 1, "temperature": 0},
            "return_routed_experts": True}  # fmt: skip
    out = adapter._post("/generate", body)
    meta = out.get("meta_info")
    payload = meta.get("routed_experts") if isinstance(meta, dict) else None
    if not isinstance(payload, str) or not payload:
        return None
    try:
        return decode_routed_experts_array(payload).astype(np.int64)
    except ValueError as exc:
        raise adapter._bad(f"routed experts: {exc}") from None


def _shaped(
    answers: list[list[np.ndarray]], client: httpx.Client, root: str
) -> tuple[list[list[np.ndarray]], MoeShape] | str:
    """Every answer as ``[rows, num_layers, top_k]`` (the baseline's MoE geometry,
    :func:`harness.server.experts.find_moe_shape`), or a line saying why not."""
    from harness.server.experts import find_moe_shape

    shape, tried = find_moe_shape(client, root)
    if shape is None:
        return f"MoE geometry unknown ({'; '.join(tried)})"
    per_row = shape.num_layers * shape.top_k
    for side in answers:
        for arr in side:
            if arr.size % per_row:
                return (
                    f"{arr.size} routed-expert ids do not divide by num_layers x top_k = "
                    f"{shape.num_layers} x {shape.top_k} (from {shape.source})"
                )
    return [[a.reshape(-1, shape.num_layers, shape.top_k) for a in side] for side in answers], shape


def _ask(
    seqs: Seq[Sequence], base: Adapter, cand: Adapter
) -> tuple[list[list[np.ndarray]], list[str]] | str:
    """Every sequence asked of the baseline twice and the candidate once (the baseline's
    token ids sent to both), or a line saying which side returned no routed experts."""
    answers: list[list[np.ndarray]] = [[], [], []]
    names = []
    sides = (("baseline", base), ("baseline", base), ("candidate", cand))
    for seq in seqs:
        key, value = _request_ids(base, seq)
        for i, (side, adapter) in enumerate(sides):
            arr = _routing(adapter, key, value)
            if arr is None:
                return f"the {side} ({adapter.base_url}) returned no routed experts: {_ENABLE}"
            answers[i].append(arr)
        names.append(seq.id)
    return answers, names


def compare_experts(
    seqs: Seq[Sequence], baseline_url: str, candidate_url: str, opts: LogprobsOptions,
    *, notes: list[str] | None = None,
) -> ExpertsComparison | None:  # fmt: skip
    """Ask both servers for the routed experts of ``seqs`` and compare
    (:func:`compare_routing`).

    Each sequence: the baseline's token ids (its ``/tokenize`` with the chat template, as
    the numerics adapters render it; a plain prompt as ``text``, cut as they cut it, at
    ``opts.max_tokens``), ``POST /generate`` with ``max_new_tokens: 1``, ``temperature: 0``
    and ``return_routed_experts: true`` to the baseline twice (the A/A floor) and the
    candidate once; rows: one per prompt token (the sampled token is never forwarded).
    MoE geometry (layers, top-k, routed experts) from the baseline, asked once the
    answers are in (:func:`harness.server.experts.find_moe_shape`). None, with one line
    appended to ``notes``, when a side returns no routed experts (or has no
    ``/generate``: vLLM), the geometry is unknown, or a request fails. Never raises
    :class:`~harness.errors.LogprobsError`.
    """
    import httpx

    from harness.errors import LogprobsError
    from harness.numerics.adapters import SGLangAdapter

    notes = notes if notes is not None else []
    if not seqs:
        return None
    headers = {"Authorization": f"Bearer {opts.api_key}"} if opts.api_key else {}
    with httpx.Client(timeout=opts.timeout_s, headers=headers) as client:
        base, cand = (SGLangAdapter(client, url, model=None, top_k=1, max_tokens=opts.max_tokens)
                      for url in (baseline_url, candidate_url))  # fmt: skip
        try:
            got = _ask(seqs, base, cand)
        except LogprobsError as exc:
            got = str(exc) + (_NO_GENERATE if "HTTP 404" in str(exc) else "")
        shaped = got if isinstance(got, str) else _shaped(got[0], client, base.base_url)
    if isinstance(shaped, str) or isinstance(got, str):
        notes.append(f"routed experts: not compared: {shaped}")
        return None
    (a, b, c), shape = shaped
    return compare_routing(a, b, c, num_routed_experts=shape.num_routed_experts,
                           dense_layers=shape.dense_layers, names=got[1])  # fmt: skip


# ------------------------------------------------------------------ recorded routing


def pack(arr: np.ndarray) -> str:
    """An int array as stored in a recording: little-endian int32, row-major, zlib
    compressed, base64 (ASCII). :func:`unpack` reverses it."""
    import base64
    import zlib

    raw = np.ascontiguousarray(arr, dtype="<i4").tobytes()
    return base64.b64encode(zlib.compress(raw, 6)).decode("ascii")


def unpack(text: str, shape: tuple[int, ...]) -> np.ndarray:
    """A :func:`pack`-ed array as int64 of ``shape``.

    Raises:
        ValueError: not base64, not zlib, or not ``prod(shape)`` int32 values.
    """
    import base64
    import binascii
    import zlib

    try:
        raw = zlib.decompress(base64.b64decode(text.encode("ascii"), validate=True))
    except (binascii.Error, zlib.error, UnicodeEncodeError) as exc:
        raise ValueError(f"not a packed routed-experts array: {exc}") from None
    flat = np.frombuffer(raw, dtype="<i4")
    if flat.size != math.prod(shape):
        raise ValueError(f"{flat.size} routed-expert ids, {shape} expected")
    return flat.astype(np.int64).reshape(shape)


class RecordedRouting(_Model):
    """One sequence's routed experts in a recording: the prompt as it was sent
    (``key`` ``input_ids`` with ``prompt`` the token ids, or ``text`` with ``prompt`` the
    text), so another server is asked the same tokens; the recorded server's two answers
    (``first``, ``second``: :func:`pack`-ed ``[rows, num_layers, top_k]`` int arrays)."""

    id: str
    key: Literal["input_ids", "text"]
    prompt: list[int] | str
    rows: int
    first: str
    second: str


class RecordedExperts(_Model):
    """The routed experts of a recording (``numerics.json`` ``experts``): the recorded
    server's MoE geometry (``num_layers``, ``top_k``, ``num_routed_experts``,
    ``dense_layers``; ``source``: where it was read, as
    :class:`~harness.server.experts.MoeShape`'s) and every sequence asked twice
    (:class:`RecordedRouting`, the A/A floor). Sequence count and rows are the live
    path's (:func:`compare_experts`: rows at most the numerics' ``max_tokens``)."""

    num_layers: int
    top_k: int
    num_routed_experts: int | None = None
    dense_layers: list[int] = Field(default_factory=list)
    source: str = ""
    sequences: list[RecordedRouting] = Field(default_factory=list)

    def passes(self, row: RecordedRouting) -> tuple[np.ndarray, np.ndarray]:
        """Both recorded answers of ``row`` as ``[rows, num_layers, top_k]`` int64 arrays.

        Raises:
            ValueError: a stored answer does not decode to that shape.
        """
        shape = (row.rows, self.num_layers, self.top_k)
        return unpack(row.first, shape), unpack(row.second, shape)


def _client(opts: LogprobsOptions) -> httpx.Client:
    import httpx

    headers = {"Authorization": f"Bearer {opts.api_key}"} if opts.api_key else {}
    return httpx.Client(timeout=opts.timeout_s, headers=headers)


def record_experts(
    seqs: Seq[Sequence], url: str, opts: LogprobsOptions,
    *, prompts: Seq[RecordedRouting] | None = None,
) -> RecordedExperts | str:  # fmt: skip
    """The routed experts of ``seqs`` on one server, asked twice each (its own A/A
    floor), for a recording: the requests :func:`compare_experts` sends the baseline
    (``input_ids`` from its ``/tokenize``, at most ``opts.max_tokens``). ``prompts``:
    ask these recorded prompts instead (another recording's, so both answer the same
    tokens; ``seqs`` is then ignored). Returns a line saying why not instead when the
    server returns no routed experts, has no ``/generate``, its MoE geometry is unknown
    or a request fails. Never raises :class:`~harness.errors.LogprobsError`."""
    from harness.errors import LogprobsError
    from harness.numerics.adapters import SGLangAdapter

    asks: list[tuple[str, str, Any]] = []
    answers: list[list[np.ndarray]] = [[], []]
    with _client(opts) as client:
        side = SGLangAdapter(client, url, model=None, top_k=1, max_tokens=opts.max_tokens)
        try:
            if prompts is not None:
                asks = [(p.id, p.key, p.prompt) for p in prompts]
            else:
                asks = [(s.id, *_request_ids(side, s)) for s in seqs]
            for _, key, value in asks:
                for i in range(2):
                    arr = _routing(side, key, value)
                    if arr is None:
                        return f"the server ({side.base_url}) returned no routed experts: {_ENABLE}"
                    answers[i].append(arr)
        except LogprobsError as exc:
            return str(exc) + (_NO_GENERATE if "HTTP 404" in str(exc) else "")
        if not asks:
            return "no sequence to ask"
        shaped = _shaped(answers, client, side.base_url)
    if isinstance(shaped, str):
        return shaped
    (first, second), shape = shaped
    rows = [
        RecordedRouting(
            id=name, key=key, prompt=list(value) if key == "input_ids" else str(value),  # type: ignore[arg-type]
            rows=min(len(a), len(b)), first=pack(a[: min(len(a), len(b))]),
            second=pack(b[: min(len(a), len(b))]),
        )
        for (name, key, value), a, b in zip(asks, first, second, strict=True)
    ]  # fmt: skip
    return RecordedExperts(
        num_layers=shape.num_layers, top_k=shape.top_k,
        num_routed_experts=shape.num_routed_experts, dense_layers=list(shape.dense_layers),
        source=shape.source, sequences=rows,
    )  # fmt: skip


def returns_experts(url: str, text: str, opts: LogprobsOptions) -> bool:
    """Whether the server at ``url`` answers one ``/generate`` of ``text`` with routed
    experts (a probe: one request; False on any error)."""
    from harness.errors import LogprobsError
    from harness.numerics.adapters import SGLangAdapter

    with _client(opts) as client:
        side = SGLangAdapter(client, url, model=None, top_k=1, max_tokens=opts.max_tokens)
        try:
            return _routing(side, "text", text[:2000]) is not None
        except LogprobsError:
            return False


def compare_recorded_experts(
    baseline: RecordedExperts, candidate: str | RecordedExperts, opts: LogprobsOptions,
    *, notes: list[str] | None = None,
) -> ExpertsComparison | None:  # fmt: skip
    """A candidate's routed experts against a recorded baseline's
    (:func:`compare_routing`): the baseline's two recorded answers are the A/A floor,
    its first the A side of A/B; the geometry is the recording's. ``candidate``: a server
    URL, asked each recorded prompt once (the recorded token ids), or another recording
    (the sequences both hold with the same prompt). None, with one line appended to
    ``notes`` (``routed experts: not compared: ...``), when the candidate returns none, a
    request fails, its answers do not fit the geometry, or no sequence is shared. Never
    raises :class:`~harness.errors.LogprobsError`."""
    from harness.errors import LogprobsError
    from harness.numerics.adapters import SGLangAdapter

    notes = notes if notes is not None else []
    a: list[np.ndarray] = []
    b: list[np.ndarray] = []
    c: list[np.ndarray] = []
    names: list[str] = []
    per_row = baseline.num_layers * baseline.top_k
    why: str | None = None
    try:
        if isinstance(candidate, RecordedExperts):
            if (candidate.num_layers, candidate.top_k) != (baseline.num_layers, baseline.top_k):
                why = (
                    f"the recordings' MoE geometries differ (layers x top-k "
                    f"{baseline.num_layers} x {baseline.top_k} vs {candidate.num_layers} x "
                    f"{candidate.top_k})"
                )
            theirs = {r.id: r for r in candidate.sequences}
            for row in baseline.sequences if why is None else []:
                other = theirs.get(row.id)
                if other is None or (other.key, other.prompt) != (row.key, row.prompt):
                    continue
                x, y = baseline.passes(row)
                a.append(x)
                b.append(y)
                c.append(candidate.passes(other)[0])
                names.append(row.id)
            if why is None and not names:
                why = "no sequence the two recordings asked with the same tokens"
        else:
            with _client(opts) as client:
                side = SGLangAdapter(
                    client, candidate, model=None, top_k=1, max_tokens=opts.max_tokens
                )
                for row in baseline.sequences:
                    got = _routing(side, row.key, row.prompt)
                    if got is None:
                        why = (
                            f"the candidate ({side.base_url}) returned no routed experts: {_ENABLE}"
                        )
                        break
                    if got.size % per_row:
                        why = (
                            f"the candidate's {got.size} routed-expert ids do not divide by "
                            f"the recording's num_layers x top_k = {baseline.num_layers} x "
                            f"{baseline.top_k}"
                        )
                        break
                    x, y = baseline.passes(row)
                    a.append(x)
                    b.append(y)
                    c.append(got.reshape(-1, *x.shape[1:]))
                    names.append(row.id)
    except LogprobsError as exc:
        why = str(exc) + (_NO_GENERATE if "HTTP 404" in str(exc) else "")
    except ValueError as exc:
        why = f"the recording's routed experts do not decode: {exc}"
    if why is None and not names:
        why = "the recording holds no sequence"
    if why is not None:
        notes.append(f"routed experts: not compared: {why}")
        return None
    return compare_routing(
        a, b, c, num_routed_experts=baseline.num_routed_experts,
        dense_layers=baseline.dense_layers, names=names,
    )  # fmt: skip
