"""Languages the interpreter accepts, their Jupyter kernels and per-execution env code."""

from __future__ import annotations

import dataclasses
import json
import re
import shlex
from collections.abc import Mapping

__all__ = ["DEFAULT_LANGUAGE", "Language", "UnknownLanguage", "language_named"]

DEFAULT_LANGUAGE = "python"
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class UnknownLanguage(ValueError):
    """A ``language`` no kernel here implements; the message lists the ones that exist."""


@dataclasses.dataclass(frozen=True, slots=True)
class Language:
    """A language name as contexts report it and the kernel spec that runs it.

    ``default_context`` names the language whose default context serves this one
    (typescript shares javascript's Deno kernel).
    """

    name: str
    kernel: str
    default_context: str

    def setup(self, max_output: int) -> str | None:
        """Code run silently after every kernel start, or ``None``.

        Python: bounds what one cell may write to stdout/stderr. Past ``max_output``
        characters the cell gets a truncation note on stderr and an ``OutputLimitExceeded``
        (a ``BaseException``, so ``except Exception`` does not swallow it); the count
        restarts with each cell. Stopping the writer inside the kernel keeps a print loop
        from growing ipykernel's buffers until the sandbox runs out of memory.
        """
        if self.kernel != "python3":
            return None
        return _PYTHON_SETUP.replace("MAX_OUTPUT", str(max_output))

    def set_env(self, env: Mapping[str, str]) -> str:
        """Code that sets ``env`` in the kernel and remembers what it replaces."""
        if self.kernel == "python3":
            return (
                "import os as __sg_os\n"
                f"__sg_env = {{k: __sg_os.environ.get(k) for k in {sorted(env)!r}}}\n"
                f"__sg_os.environ.update({dict(env)!r})\n"
            )
        if self.kernel == "deno":
            names, values = json.dumps(sorted(env)), json.dumps(dict(env))
            return (
                "globalThis.__sg_env = Object.fromEntries("
                f"{names}.map((k) => [k, Deno.env.get(k)]));\n"
                f"for (const [k, v] of Object.entries({values})) Deno.env.set(k, v);\n"
            )
        lines = []
        for name, value in env.items():
            _check_shell_name(name)
            lines.append(
                f'__sg_had_{name}="${{{name}+x}}"; __sg_old_{name}="${{{name}-}}"; '
                f"export {name}={shlex.quote(value)}"
            )
        return "\n".join(lines)

    def export_env(self, env: Mapping[str, str]) -> str:
        """Code that sets ``env`` for the rest of the kernel's life (sandbox-level envs)."""
        if self.kernel == "python3":
            return f"import os as __sg_os\n__sg_os.environ.update({dict(env)!r})\ndel __sg_os\n"
        if self.kernel == "deno":
            values = json.dumps(dict(env))
            return f"for (const [k, v] of Object.entries({values})) Deno.env.set(k, v);\n"
        lines = []
        for name, value in env.items():
            _check_shell_name(name)
            lines.append(f"export {name}={shlex.quote(value)}")
        return "\n".join(lines)

    def restore_env(self, env: Mapping[str, str]) -> str:
        """Code that undoes ``set_env(env)``."""
        if self.kernel == "python3":
            return (
                "for __sg_k, __sg_v in __sg_env.items():\n"
                "    if __sg_v is None:\n"
                "        __sg_os.environ.pop(__sg_k, None)\n"
                "    else:\n"
                "        __sg_os.environ[__sg_k] = __sg_v\n"
                "del __sg_env, __sg_os, __sg_k, __sg_v\n"
            )
        if self.kernel == "deno":
            return (
                "for (const [k, v] of Object.entries(globalThis.__sg_env)) "
                "{ if (v === undefined) Deno.env.delete(k); else Deno.env.set(k, v); }\n"
                "delete globalThis.__sg_env;\n"
            )
        lines = []
        for name in env:
            _check_shell_name(name)
            lines.append(
                f'if [ -n "$__sg_had_{name}" ]; then export {name}="$__sg_old_{name}"; '
                f"else unset {name}; fi; unset __sg_had_{name} __sg_old_{name}"
            )
        return "\n".join(lines)


_PYTHON_SETUP = """
def __sg_bound_output(limit):
    import sys
    from IPython import get_ipython

    class OutputLimitExceeded(BaseException):
        pass

    written = [0]
    get_ipython().events.register("pre_run_cell", lambda *_: written.__setitem__(0, 0))
    note = sys.stderr.write

    def bounded(write):
        def limited(text):
            before = written[0]
            written[0] += len(text)
            if written[0] <= limit:
                return write(text)
            if before <= limit:
                write(text[: limit - before])
                note(f"\\n[sandgate: output truncated after {limit} bytes]\\n")
            raise OutputLimitExceeded(
                f"the cell wrote more than {limit} bytes of output and was stopped; "
                "the context's state is kept"
            )

        return limited

    sys.stdout.write = bounded(sys.stdout.write)
    sys.stderr.write = bounded(sys.stderr.write)


__sg_bound_output(MAX_OUTPUT)
del __sg_bound_output
"""


def _check_shell_name(name: str) -> None:
    if not _ENV_NAME.match(name):
        raise ValueError(f"invalid environment variable name for bash: {name!r}")


_LANGUAGES = {
    "python": Language("python", "python3", "python"),
    "javascript": Language("javascript", "deno", "javascript"),
    "typescript": Language("typescript", "deno", "javascript"),
    "bash": Language("bash", "bash", "bash"),
}
_ALIASES = {
    "js": "javascript",
    "ts": "typescript",
    "py": "python",
    "python3": "python",
    "sh": "bash",
}


def language_named(name: str | None) -> Language:
    """The language for a request's ``language`` (trimmed, lowercased, aliases resolved);
    ``None`` or empty means python. Raises ``UnknownLanguage``."""
    key = (name or DEFAULT_LANGUAGE).strip().lower() or DEFAULT_LANGUAGE
    key = _ALIASES.get(key, key)
    language = _LANGUAGES.get(key)
    if language is None:
        known = ", ".join(sorted(_LANGUAGES))
        raise UnknownLanguage(f"language {name!r} is not available here: use one of {known}")
    return language
