"""The pinned clients the compatibility suite drives, and how to prepare them.

Two registries: :data:`CLIENTS`, the official E2B SDKs (every ``compat`` test runs once per
client), and :data:`FRAMEWORKS`, the third-party agent frameworks that drive E2B (OpenAI Agents
SDK, smolagents, langchain-e2b, e2b-haystack), each exercised by its own scenario in
``test_agent_frameworks.py``. Both are pinned, locked and installed the same way.

Each client lives in its own isolated environment under ``.cache/compat/<name>/`` (git-ignored),
built from a lock file committed in ``tests/compat/clients/``:

* Python: ``uv venv --python 3.11`` then ``uv pip sync --require-hashes --compile-bytecode
  requirements.txt``.
* JS: a copy of ``package.json`` + ``package-lock.json``, then ``npm ci``; afterwards exactly one
  ``e2b`` version may be installed, or the code-interpreter package would talk through another.

Preparation is idempotent: a stamp file records the hash of the inputs, and an environment whose
stamp matches is reused as it is. A file lock serialises concurrent preparations (pytest-xdist).

A scenario script (``scenarios/<lang>/<name>.py|.js``) reads only the ``E2B_*`` variables and its
arguments, and prints one JSON object as its last line of stdout; :meth:`PreparedClient.run`
returns that object, or raises ``AssertionError`` carrying the script's stderr.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

COMPAT_DIR = Path(__file__).resolve().parent
REPO_ROOT = COMPAT_DIR.parents[1]
CLIENTS_DIR = COMPAT_DIR / "clients"
SCENARIOS_DIR = COMPAT_DIR / "scenarios"
CACHE_ROOT = REPO_ROOT / ".cache" / "compat"

#: Bump when the preparation recipe changes, so existing environments are rebuilt.
_RECIPE = "2"
_PREPARE_TIMEOUT_S = 900
_SCRIPT_TIMEOUT_S = 240
#: Variables kept from the test process when running a scenario; everything else (E2B_*,
#: VIRTUAL_ENV, PYTHONPATH, NODE_OPTIONS, ...) is dropped so only the test decides the inputs.
_INHERITED_ENV = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "SYSTEMROOT", "TZ")

Lang = Literal["python", "js"]


@dataclass(frozen=True)
class ClientSpec:
    """One pinned client: where its lock lives and which language runs it."""

    name: str
    lang: Lang
    source: Path

    @property
    def lock_inputs(self) -> tuple[Path, ...]:
        if self.lang == "python":
            return (self.source / "requirements.txt",)
        return (self.source / "package.json", self.source / "package-lock.json")


CLIENTS: tuple[ClientSpec, ...] = (
    ClientSpec("py-e2b-2.31.0", "python", CLIENTS_DIR / "python" / "e2b-2.31.0"),
    ClientSpec("py-e2b-2.63.0", "python", CLIENTS_DIR / "python" / "e2b-2.63.0"),
    ClientSpec("js-e2b-2.31.0", "js", CLIENTS_DIR / "js" / "e2b-2.31.0"),
    ClientSpec("js-e2b-2.51.0", "js", CLIENTS_DIR / "js" / "e2b-2.51.0"),
)

#: The E2B CLI (``@e2b/cli``) as an acceptance client; it brings its own ``e2b`` SDK.
CLI = ClientSpec("js-e2b-cli-2.19.0", "js", CLIENTS_DIR / "js" / "e2b-cli-2.19.0")

#: Agent frameworks as acceptance clients; each lock also pins the e2b (and, where the
#: framework wants it, e2b-code-interpreter) version the framework resolves to.
FRAMEWORKS: tuple[ClientSpec, ...] = (
    ClientSpec(
        "py-openai-agents-0.24.0", "python", CLIENTS_DIR / "python" / "openai-agents-0.24.0"
    ),
    ClientSpec("py-smolagents-1.26.0", "python", CLIENTS_DIR / "python" / "smolagents-1.26.0"),
    ClientSpec("py-langchain-e2b-0.0.6", "python", CLIENTS_DIR / "python" / "langchain-e2b-0.0.6"),
    ClientSpec("py-e2b-haystack-2.0.0", "python", CLIENTS_DIR / "python" / "e2b-haystack-2.0.0"),
)

#: E2B's MCP server (PyPI ``e2b-mcp-server``, on E2B SDK 1.x), driven over stdio by the MCP
#: client of its own environment (``test_mcp_server.py``).
E2B_MCP_SERVER = ClientSpec(
    "py-e2b-mcp-server-0.1.1", "python", CLIENTS_DIR / "python" / "e2b-mcp-server-0.1.1"
)


#: The E2B CLI (``@e2b/cli``, which brings its own ``e2b``), run as a command
#: (:meth:`PreparedClient.cli`); its scenarios are the CLI's own subcommands.
CLI: ClientSpec = ClientSpec("js-e2b-cli-2.19.0", "js", CLIENTS_DIR / "js" / "e2b-cli-2.19.0")


@dataclass(frozen=True)
class PreparedClient:
    """A client whose environment is installed; runs scenario scripts with it."""

    spec: ClientSpec
    root: Path

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def lang(self) -> Lang:
        return self.spec.lang

    @property
    def python(self) -> Path:
        return self.root / "venv" / "bin" / "python"

    @property
    def node_modules(self) -> Path:
        return self.root / "pkg" / "node_modules"

    def cli(self, args: Sequence[str], env: Mapping[str, str]) -> tuple[list[str], dict[str, str]]:
        """The argv and environment that run this client's ``e2b`` command with ``args``:
        ``env`` over a scrubbed copy of the test's environment, no update check."""
        full_env = {k: os.environ[k] for k in _INHERITED_ENV if k in os.environ}
        full_env.update({"NO_UPDATE_NOTIFIER": "1", **env})
        return [str(self.node_modules / ".bin" / "e2b"), *args], full_env

    def script_path(self, script_name: str) -> Path:
        suffix = ".py" if self.lang == "python" else ".js"
        path = SCENARIOS_DIR / self.lang / f"{script_name}{suffix}"
        if not path.is_file():
            raise FileNotFoundError(f"no {self.lang} scenario named {script_name!r}: {path}")
        return path

    def command(self, script_name: str, args: Sequence[str] = ()) -> list[str]:
        script = str(self.script_path(script_name))
        if self.lang == "python":
            return [str(self.python), script, *args]
        return ["node", script, *args]

    def run(
        self,
        script_name: str,
        env: Mapping[str, str],
        args: Sequence[str] = (),
        *,
        timeout: float = _SCRIPT_TIMEOUT_S,
        wrap: Callable[[list[str]], list[str]] | None = None,
    ) -> dict[str, Any]:
        """Runs a scenario and returns the JSON object on its last stdout line.

        ``env`` is laid over a scrubbed copy of the test's environment (see ``_INHERITED_ENV``).
        ``wrap`` rewrites the command line (to run it where test names resolve, for example).
        Raises ``AssertionError`` with the script's stdout and stderr when it exits non-zero,
        times out, or prints no JSON object last.
        """
        full_env = {k: os.environ[k] for k in _INHERITED_ENV if k in os.environ}
        if self.lang == "js":
            full_env["NODE_PATH"] = str(self.node_modules)
            cwd = self.root / "pkg"
        else:
            full_env["PYTHONUNBUFFERED"] = "1"
            cwd = self.root
        full_env.update(env)
        argv = self.command(script_name, [str(a) for a in args])
        if wrap is not None:
            argv = wrap(argv)
        try:
            proc = subprocess.run(
                argv,
                cwd=cwd,
                env=full_env,
                capture_output=True,
                text=True,
                timeout=timeout,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            raise AssertionError(
                f"{self.name}: scenario {script_name} did not finish within {timeout} s\n"
                f"--- stdout ---\n{_text(exc.stdout)}\n--- stderr ---\n{_text(exc.stderr)}"
            ) from None
        if proc.returncode != 0:
            raise AssertionError(
                f"{self.name}: scenario {script_name} exited with {proc.returncode}\n"
                f"--- stdout ---\n{proc.stdout}\n--- stderr ---\n{proc.stderr}"
            )
        lines = proc.stdout.strip().splitlines()
        try:
            result = json.loads(lines[-1])
        except (IndexError, json.JSONDecodeError):
            result = None
        if not isinstance(result, dict):
            raise AssertionError(
                f"{self.name}: scenario {script_name} printed no JSON object last\n"
                f"--- stdout ---\n{proc.stdout}\n--- stderr ---\n{proc.stderr}"
            )
        return result


def spec_named(name: str) -> ClientSpec:
    known = (*CLIENTS, *FRAMEWORKS, CLI, E2B_MCP_SERVER)
    for spec in known:
        if spec.name == name:
            return spec
    raise KeyError(f"no compat client named {name!r}; known: {[s.name for s in known]}")


def prepare(spec: ClientSpec, cache_root: Path = CACHE_ROOT) -> PreparedClient:
    """Installs ``spec``'s environment unless its stamp says it is current; returns it.

    Raises ``RuntimeError`` with the installer's output when installation fails.
    """
    root = cache_root / spec.name
    root.mkdir(parents=True, exist_ok=True)
    client = PreparedClient(spec, root)
    digest = _inputs_digest(spec)
    stamp = root / "stamp"
    with _locked(root / ".lock"):
        if _read(stamp) == digest and _is_installed(client):
            return client
        stamp.unlink(missing_ok=True)
        if spec.lang == "python":
            _prepare_python(client)
        else:
            _prepare_js(client)
        stamp.write_text(digest, encoding="utf-8")
    return client


def prepare_all(cache_root: Path = CACHE_ROOT) -> list[PreparedClient]:
    return [prepare(spec, cache_root) for spec in (*CLIENTS, *FRAMEWORKS, CLI, E2B_MCP_SERVER)]


def _prepare_python(client: PreparedClient) -> None:
    venv = client.root / "venv"
    if venv.exists():
        shutil.rmtree(venv)
    uv = shutil.which("uv")
    if uv is None:
        raise RuntimeError("uv is not on PATH; it is needed to build the Python compat clients")
    env = {k: v for k, v in os.environ.items() if k not in {"VIRTUAL_ENV", "UV_PYTHON"}}
    _check_call([uv, "venv", "--python", "3.11", str(venv)], env=env)
    _check_call(
        [
            uv,
            "pip",
            "sync",
            "--require-hashes",
            # Bytecode now, once: a scenario is a fresh interpreter, which would otherwise
            # compile every module it imports, every run, where .pyc files are not written
            # (PYTHONDONTWRITEBYTECODE, as on the CI image).
            "--compile-bytecode",
            "--python",
            str(client.python),
            str(client.spec.source / "requirements.txt"),
        ],
        env=env,
    )


def _prepare_js(client: PreparedClient) -> None:
    pkg = client.root / "pkg"
    if pkg.exists():
        shutil.rmtree(pkg)
    pkg.mkdir()
    for source in client.spec.lock_inputs:
        shutil.copy2(source, pkg / source.name)
    _check_call(["npm", "ci", "--no-audit", "--no-fund", "--ignore-scripts"], cwd=pkg)
    listing = _check_call(["npm", "ls", "e2b", "--all", "--json"], cwd=pkg)
    versions = sorted(set(_e2b_versions(json.loads(listing))))
    if len(versions) != 1:
        raise RuntimeError(f"{client.name}: expected one installed e2b version, got {versions}")


def _e2b_versions(tree: Mapping[str, Any]) -> Iterator[str]:
    for name, dep in tree.get("dependencies", {}).items():
        if name == "e2b" and "version" in dep:
            yield dep["version"]
        yield from _e2b_versions(dep)


def _is_installed(client: PreparedClient) -> bool:
    if client.lang == "python":
        return client.python.exists()
    return (client.node_modules / "e2b" / "package.json").is_file()


def _inputs_digest(spec: ClientSpec) -> str:
    digest = hashlib.sha256(f"recipe={_RECIPE}".encode())
    for path in spec.lock_inputs:
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def _check_call(
    argv: Sequence[str], *, cwd: Path | None = None, env: Mapping[str, str] | None = None
) -> str:
    proc = subprocess.run(
        list(argv),
        cwd=cwd,
        env=dict(env) if env is not None else None,
        capture_output=True,
        text=True,
        timeout=_PREPARE_TIMEOUT_S,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(
            f"{' '.join(argv)} failed with {proc.returncode}\n"
            f"--- stdout ---\n{proc.stdout}\n--- stderr ---\n{proc.stderr}"
        )
    return proc.stdout


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None


def _text(data: str | bytes | None) -> str:
    if data is None:
        return ""
    return data.decode(errors="replace") if isinstance(data, bytes) else data


if __name__ == "__main__":
    for prepared in prepare_all():
        print(f"{prepared.name}: ready in {prepared.root}")
