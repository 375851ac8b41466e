"""Matrix files: the deployments of an isolation matrix, their attributes and the criterion.

A matrix file (YAML or JSON) is parsed into :class:`MatrixSpec` with unknown keys
rejected (``extra="forbid"``). Every problem raises :class:`MatrixError`, a
:class:`harness.scenario.model.ScenarioError` whose ``str`` is one line naming the file, the
field and the fix, e.g. ``m.yaml: deployments[2].url: give exactly one of url, launch, sim``.

Paths (``scenarios``, ``gsm8k.data``, ``log``) are relative to the matrix file's folder.
Attribute values are text: YAML's ``on``/``off``/``yes``/``no`` stay as written (the
loader resolves only ``true``/``false`` as booleans, and numbers keep their spelling, so
``triton: 3.10`` reads ``"3.10"``).

Fields (defaults in brackets): ``name``; ``scenarios`` (files or folders, required);
``repeats`` [3]; ``stream`` [false]; ``concurrency`` (runs in flight per deployment) [4];
``timeout_s`` (per request) [120]; ``gsm8k`` (``questions`` [500], ``data``, ``shots`` [5],
``parallel`` [64]; omit to skip GSM8K); ``pass_criterion`` (:class:`PassCriterion`:
``min_pass_rate`` [0.8], ``min_final_answer_rate``, ``min_gsm8k_accuracy``,
``max_infra_error_rate`` [0.2]); ``deployments`` (at least 2, :class:`DeploymentSpec`:
``label``, one of ``url``/``launch``/``sim``, ``attributes``, ``model``, ``api_key_env``,
``log``, ``boot_timeout_s`` [1800]).

Example (abridged from ``examples/matrix-seed-case.yaml``)::

    scenarios: [../scenarios/sensor_entropy_pipeline.yaml]
    repeats: 3
    pass_criterion: {min_pass_rate: 0.8}
    deployments:
      - {label: fused-E129, url: "http://10.0.0.5:30000", attributes: {fusion: on, moe_config: tuned-E129}}
      - {label: unfused-E128, launch: "python -m sglang.launch_server ... --port 30001",
         attributes: {fusion: off, moe_config: tuned-E128}}
      - {label: demo, sim: healthy, attributes: {fusion: off, moe_config: none}}
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from harness.errors import MatrixError
from harness.scenario.model import MAX_REPEATS

__all__ = [
    "DEFAULT_MIN_PASS_RATE",
    "DeploymentSpec",
    "GSM8KSpec",
    "MatrixError",
    "MatrixSpec",
    "PassCriterion",
    "load_matrix",
    "matrix_from_data",
]

#: a deployment passes when at least this share of its scored runs pass (harness.scoring.score)
DEFAULT_MIN_PASS_RATE = 0.8


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (str, int, float)):
        return str(value)
    raise ValueError(f"attribute values must be text or numbers, not {type(value).__name__}")


class DeploymentSpec(_Strict):
    """One deployment: where it runs (exactly one of ``url``, ``launch``, ``sim``) and its attributes.

    - ``url``: a running OpenAI-compatible server (with or without ``/v1``).
    - ``launch``: a command that starts the server (run without a shell, as ``harness boot``
      does); the URL comes from ``--port``/``--url`` in it or from its log. Launched
      deployments run one at a time (they usually share the GPUs), each stopped after.
    - ``sim``: a profile of the built-in reference server (:mod:`harness.sim`), started
      in-process: for demos and tests.
    """

    label: str = Field(pattern=r"^[A-Za-z0-9_.\-]{1,64}$")
    url: str | None = None
    launch: str | list[str] | None = None
    sim: str | None = None
    attributes: dict[str, str] = Field(default_factory=dict)
    model: str | None = None
    api_key_env: str = "OPENAI_API_KEY"
    log: str | None = None  # server log, for the fusion-engagement record
    boot_timeout_s: float = Field(default=1800.0, gt=0)

    @field_validator("attributes", mode="before")
    @classmethod
    def _attributes_as_text(cls, value: Any) -> Any:
        if isinstance(value, dict):
            return {str(k): _text(v) for k, v in value.items()}
        return value

    @field_validator("launch", mode="before")
    @classmethod
    def _a_command(cls, value: Any) -> Any:
        """An empty ``launch`` (``""``, blank, ``[]``) is refused here, naming the field, not
        when the deployment is started (the key with no value is no ``launch``: a saved
        spec holds ``null``)."""
        if not isinstance(value, (str, list)):
            return value  # None, or pydantic names the type wanted
        try:
            argv = shlex.split(value) if isinstance(value, str) else value
        except ValueError as exc:  # shlex: "No closing quotation"
            raise ValueError(f"{value!r} is not a command line ({exc})") from None
        if not argv or not str(argv[0]).strip():
            raise ValueError(
                f"an empty command ({value!r}); give the server's command line, e.g. "
                '"python -m sglang.launch_server --model-path M --port 30001"'
            )
        return value

    @model_validator(mode="after")
    def _one_source(self) -> DeploymentSpec:
        given = [k for k in ("url", "launch", "sim") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError(f"give exactly one of url, launch, sim (got {given or 'none'})")
        if self.url is not None and not self.url.startswith(("http://", "https://")):
            raise ValueError(f"url {self.url!r} is not a URL; give http://HOST:PORT")
        return self

    @property
    def source(self) -> str:
        """``"url"``, ``"launch"`` or ``"sim"``."""
        return "url" if self.url is not None else "launch" if self.launch is not None else "sim"

    def launch_argv(self) -> list[str]:
        """The ``launch`` command as an argument list (a string is split like a shell,
        :func:`shlex.split`); empty for ``url`` and ``sim`` deployments."""
        cmd = self.launch or []
        return shlex.split(cmd) if isinstance(cmd, str) else list(cmd)


class GSM8KSpec(_Strict):
    """GSM8K accuracy per deployment (:func:`harness.gsm8k.run.run_gsm8k`)."""

    questions: int = Field(default=500, ge=1)
    data: str | None = None  # GSM8K test jsonl (default: harness.gsm8k.run's official split)
    shots: int = Field(default=5, ge=0)
    parallel: int = Field(default=64, ge=1)


class PassCriterion(_Strict):
    """When a deployment passes. All given thresholds must hold (rates in [0, 1]).

    - ``min_pass_rate`` (default 0.8): share of scored runs that pass
      (:func:`harness.scoring.score.score_run`'s ``passed``).
    - ``min_final_answer_rate``: share of scored runs that reached a final answer.
    - ``min_gsm8k_accuracy``: GSM8K accuracy (only when ``gsm8k`` is run).
    - ``max_infra_error_rate`` (default 0.2): above it a deployment is not judged
      (status ``error``): the server, not the model, failed.
    """

    min_pass_rate: float = Field(default=DEFAULT_MIN_PASS_RATE, ge=0, le=1)
    min_final_answer_rate: float | None = Field(default=None, ge=0, le=1)
    min_gsm8k_accuracy: float | None = Field(default=None, ge=0, le=1)
    max_infra_error_rate: float = Field(default=0.2, ge=0, le=1)


class MatrixSpec(_Strict):
    """The whole matrix file."""

    name: str | None = None
    deployments: list[DeploymentSpec] = Field(min_length=2)
    scenarios: list[str] = Field(min_length=1)
    repeats: int = Field(default=3, ge=1, le=MAX_REPEATS)
    stream: bool = False
    concurrency: int = Field(default=4, ge=1)  # runs in flight per deployment
    timeout_s: float = Field(default=120.0, gt=0)  # per request
    gsm8k: GSM8KSpec | None = None
    pass_criterion: PassCriterion = Field(default_factory=PassCriterion)
    source: str | None = Field(default=None, exclude=True)


class _TextLoader(yaml.SafeLoader):
    """SafeLoader that resolves only ``true``/``false`` and ``null``: numbers, ``on``,
    ``off`` and dates stay text (pydantic converts where a number is wanted)."""


_DROP = {f"tag:yaml.org,2002:{t}" for t in ("bool", "int", "float", "timestamp")}
_TextLoader.yaml_implicit_resolvers = {
    k: [(tag, rx) for tag, rx in v if tag not in _DROP]
    for k, v in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_TextLoader.add_implicit_resolver(
    "tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
)


def _loc(loc: Any) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else ("." if out else "") + str(part)
    return out


def _resolve(spec: MatrixSpec, base: Path) -> MatrixSpec:
    def rel(p: str) -> str:
        return str(Path(p) if Path(p).is_absolute() else base / p)

    spec.scenarios = [rel(s) for s in spec.scenarios]
    if spec.gsm8k is not None and spec.gsm8k.data is not None:
        spec.gsm8k.data = rel(spec.gsm8k.data)
    for d in spec.deployments:
        d.log = rel(d.log) if d.log else None
    return spec


def matrix_from_data(data: Any, path: str | Path | None = None) -> MatrixSpec:
    """Validate parsed data into a :class:`MatrixSpec`; paths resolved against ``path``'s folder.

    Raises:
        MatrixError: naming ``path`` and the field.
    """
    if not isinstance(data, dict):
        raise MatrixError(path, "", "a matrix file must hold a mapping at the top level")
    try:
        spec = MatrixSpec.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            msg = (
                "unknown key; check its spelling (the format: the docstring of "
                "harness/matrix/spec.py; an example: examples/matrix-seed-case.yaml)"
            )
        raise MatrixError(path, _loc(err["loc"]), msg) from None
    seen: set[str] = set()
    for i, d in enumerate(spec.deployments):
        if d.label in seen:
            reason = f"{d.label!r} is used twice; give each deployment its own label"
            raise MatrixError(path, f"deployments[{i}].label", reason)
        seen.add(d.label)
    spec.source = str(path) if path is not None else None
    return _resolve(spec, Path(path).parent if path is not None else Path("."))


def load_matrix(path: str | Path) -> MatrixSpec:
    """Load a matrix file (``.yaml``, ``.yml`` or ``.json``) and check its paths exist.

    Raises:
        MatrixError: unreadable file, bad YAML/JSON, an invalid field or a missing path.
    """
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise MatrixError(p, "", f"cannot read: {exc.strerror}") from None
    try:
        data = json.loads(text) if p.suffix == ".json" else yaml.load(text, Loader=_TextLoader)  # noqa: S506
    except (yaml.YAMLError, json.JSONDecodeError) as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark is not None else ""
        reason = getattr(exc, "problem", None) or getattr(exc, "msg", None) or str(exc)
        raise MatrixError(p, where, f"not valid {p.suffix.lstrip('.').upper()}: {reason}") from None
    spec = matrix_from_data(data, p)
    for i, s in enumerate(spec.scenarios):
        if not Path(s).exists():
            raise MatrixError(
                p,
                f"scenarios[{i}]",
                f"{s}: no such file or directory (paths are relative to the matrix file)",
            )
    if spec.gsm8k is not None and spec.gsm8k.data and not Path(spec.gsm8k.data).is_file():
        raise MatrixError(p, "gsm8k.data", f"{spec.gsm8k.data}: no such file")
    from harness.sim.profiles import PROFILES

    for i, d in enumerate(spec.deployments):
        if d.sim is not None and d.sim not in PROFILES:
            known = ", ".join(sorted(PROFILES))
            raise MatrixError(
                p, f"deployments[{i}].sim", f"unknown profile {d.sim!r}; one of {known}"
            )
        if d.log and not Path(d.log).is_file():
            raise MatrixError(p, f"deployments[{i}].log", f"{d.log}: no such file")
    return spec
