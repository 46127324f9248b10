"""Languages the interpreter accepts, their Jupyter kernels, and the code each kernel runs to
set itself up and to set, export and restore environment variables.

Environment variables reach a kernel as code in its own language, run silently before and
after the cell (``Context.execute``): a kernel is a long-lived process, so a per-execution
``env_vars`` must be set inside it and undone afterwards. Each dialect below says how.
"""

from __future__ import annotations

import dataclasses
import json
import re
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Protocol

__all__ = [
    "DEFAULT_LANGUAGE",
    "Language",
    "UnknownLanguage",
    "check_env",
    "language_named",
    "languages",
]

DEFAULT_LANGUAGE = "python"
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
#: The in-kernel helpers of the Python kernel (``_ipython/``), loaded by path at kernel start.
_IPYTHON_HELPERS = Path(__file__).resolve().parent / "_ipython"


class UnknownLanguage(ValueError):
    """A ``language`` no kernel here implements; the message lists the ones that exist."""


def check_env(env: Mapping[str, str]) -> None:
    """Raises ``ValueError`` for a name or value no process environment can hold: an empty
    name, ``=`` in a name, or a NUL byte anywhere."""
    for name, value in env.items():
        if not name or "=" in name or "\0" in name:
            raise ValueError(f"invalid environment variable name {name!r}")
        if "\0" in value:
            raise ValueError(f"the value of environment variable {name} contains a NUL byte")


class Dialect(Protocol):
    """The code one kind of kernel runs for the interpreter."""

    def setup(self, max_output: int) -> str | None:
        """Code run silently after every kernel start and restart, or ``None``."""

    def set_env(self, env: Mapping[str, str]) -> str:
        """Code that sets ``env`` and remembers what it replaces, for ``restore_env``."""

    def restore_env(self, env: Mapping[str, str]) -> str:
        """Code that undoes ``set_env(env)``."""

    def export_env(self, env: Mapping[str, str]) -> str:
        """Code that sets ``env`` for the rest of the kernel's life (sandbox-level envs)."""


class _Python:
    def setup(self, max_output: int) -> str | None:
        """Loads ``_ipython`` under a private module name (user code's ``sys.path`` stays as
        it is) and installs it: bounded output, ``Result.data`` for pandas DataFrames and
        ``Result.chart`` for matplotlib figures."""
        init = _IPYTHON_HELPERS / "__init__.py"
        return _PYTHON_SETUP.format(
            init=repr(str(init)), package=repr(str(_IPYTHON_HELPERS)), max_output=max_output
        )

    def set_env(self, env: Mapping[str, str]) -> str:
        return (
            "import os as __sg_os\n"
            f"__sg_env = {{k: __sg_os.environ.get(k) for k in {sorted(env)!r}}}\n"
            f"__sg_os.environ.update({dict(env)!r})\n"
        )

    def restore_env(self, env: Mapping[str, str]) -> str:
        return (
            "for __sg_k, __sg_v in __sg_env.items():\n"
            "    if __sg_v is None:\n"
            "        __sg_os.environ.pop(__sg_k, None)\n"
            "    else:\n"
            "        __sg_os.environ[__sg_k] = __sg_v\n"
            "del __sg_env, __sg_os, __sg_k, __sg_v\n"
        )

    def export_env(self, env: Mapping[str, str]) -> str:
        return f"import os as __sg_os\n__sg_os.environ.update({dict(env)!r})\ndel __sg_os\n"


_PYTHON_SETUP = """
def __sg_install():
    import importlib.util
    import sys

    spec = importlib.util.spec_from_file_location(
        "_sandgate_ipython", {init}, submodule_search_locations=[{package}]
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules["_sandgate_ipython"] = module
    spec.loader.exec_module(module)
    module.install({max_output})


__sg_install()
del __sg_install
"""


class _Deno:
    def setup(self, max_output: int) -> str | None:
        return None

    def set_env(self, env: Mapping[str, str]) -> str:
        names, values = json.dumps(sorted(env)), json.dumps(dict(env))
        return (
            "globalThis.__sg_env = Object.fromEntries("
            f"{names}.map((k) => [k, Deno.env.get(k)]));\n"
            f"for (const [k, v] of Object.entries({values})) Deno.env.set(k, v);\n"
        )

    def restore_env(self, env: Mapping[str, str]) -> str:
        return (
            "for (const [k, v] of Object.entries(globalThis.__sg_env)) "
            "{ if (v === undefined) Deno.env.delete(k); else Deno.env.set(k, v); }\n"
            "delete globalThis.__sg_env;\n"
        )

    def export_env(self, env: Mapping[str, str]) -> str:
        values = json.dumps(dict(env))
        return f"for (const [k, v] of Object.entries({values})) Deno.env.set(k, v);\n"


class _Bash:
    def setup(self, max_output: int) -> str | None:
        return None

    def set_env(self, env: Mapping[str, str]) -> str:
        lines = []
        for name, value in env.items():
            _check_shell_name(name)
            lines.append(
                f'__sg_had_{name}="${{{name}+x}}"; __sg_old_{name}="${{{name}-}}"; '
                f"export {name}={shlex.quote(value)}"
            )
        return "\n".join(lines)

    def restore_env(self, env: Mapping[str, str]) -> str:
        lines = []
        for name in env:
            _check_shell_name(name)
            lines.append(
                f'if [ -n "$__sg_had_{name}" ]; then export {name}="$__sg_old_{name}"; '
                f"else unset {name}; fi; unset __sg_had_{name} __sg_old_{name}"
            )
        return "\n".join(lines)

    def export_env(self, env: Mapping[str, str]) -> str:
        lines = []
        for name, value in env.items():
            _check_shell_name(name)
            lines.append(f"export {name}={shlex.quote(value)}")
        return "\n".join(lines)


class _R:
    """IRkernel: ``Sys.setenv``/``Sys.unsetenv`` change the R process's own environment, so
    ``Sys.getenv`` and ``system()`` children see the values. The old values wait in the
    hidden ``.sg_env`` of the global environment (``ls()`` does not list dot names)."""

    def setup(self, max_output: int) -> str | None:
        return None

    def set_env(self, env: Mapping[str, str]) -> str:
        names = ", ".join(_r_string(name) for name in env)
        return (
            f'assign(".sg_env", Sys.getenv(c({names}), unset = NA, names = TRUE), '
            "envir = globalenv())\n" + self.export_env(env)
        )

    def restore_env(self, env: Mapping[str, str]) -> str:
        return (
            'local({ old <- get(".sg_env", envir = globalenv()); '
            "for (k in names(old)) { if (is.na(old[[k]])) Sys.unsetenv(k) "
            "else do.call(Sys.setenv, as.list(old[k])) }; "
            'rm(".sg_env", envir = globalenv()) })\n'
        )

    def export_env(self, env: Mapping[str, str]) -> str:
        pairs = ", ".join(f"{_r_string(k)} = {_r_string(v)}" for k, v in env.items())
        return f"invisible(Sys.setenv({pairs}))\n"


class _Java:
    """JJava (jshell in the kernel's JVM). A JVM cannot change its own environment, so the
    helpers defined by ``setup`` update the map behind ``System.getenv()`` (reflection; the
    kernel spec opens ``java.base`` for it) and, as E2B's server does, the system property of
    the same name. ``ProcessBuilder.environment()`` copies that map, so children started
    through it see the values; ``Runtime.exec`` without an environment passes the JVM's
    original one. Without reflection access only the properties change."""

    def setup(self, max_output: int) -> str | None:
        return _JAVA_SETUP

    def set_env(self, env: Mapping[str, str]) -> str:
        return "".join(
            f"__sgSet({_java_string(k)}, {_java_string(v)}, true);\n" for k, v in env.items()
        )

    def restore_env(self, env: Mapping[str, str]) -> str:
        return "__sgRestore();\n"

    def export_env(self, env: Mapping[str, str]) -> str:
        return "".join(
            f"__sgSet({_java_string(k)}, {_java_string(v)}, false);\n" for k, v in env.items()
        )


_JAVA_SETUP = """
java.util.Map<String, String[]> __sgSaved = new java.util.HashMap<>();

void __sgPut(String name, String env, String property) {
    try {
        java.lang.reflect.Field view = Class.forName("java.lang.ProcessEnvironment")
            .getDeclaredField("theUnmodifiableEnvironment");
        view.setAccessible(true);
        Object unmodifiable = view.get(null);
        java.lang.reflect.Field inner = unmodifiable.getClass().getDeclaredField("m");
        inner.setAccessible(true);
        @SuppressWarnings("unchecked")
        java.util.Map<String, String> vars =
            (java.util.Map<String, String>) inner.get(unmodifiable);
        if (env == null) vars.remove(name); else vars.put(name, env);
    } catch (ReflectiveOperationException | RuntimeException e) {
        // No reflection access: the system property below is all that changes.
    }
    if (property == null) System.clearProperty(name); else System.setProperty(name, property);
}

void __sgSet(String name, String value, boolean remember) {
    if (remember && !__sgSaved.containsKey(name)) {
        __sgSaved.put(name, new String[] {System.getenv(name), System.getProperty(name)});
    }
    __sgPut(name, value, value);
}

void __sgRestore() {
    for (java.util.Map.Entry<String, String[]> saved : __sgSaved.entrySet()) {
        __sgPut(saved.getKey(), saved.getValue()[0], saved.getValue()[1]);
    }
    __sgSaved.clear();
}
"""


def _check_shell_name(name: str) -> None:
    if not _ENV_NAME.match(name):
        raise ValueError(f"invalid environment variable name for bash: {name!r}")


def _r_string(text: str) -> str:
    """An R string literal for ``text``, ASCII only (``\\U{...}`` for the rest), so it means
    the same in any locale."""
    out = ['"']
    for char in text:
        code = ord(char)
        if char in '"\\':
            out.append("\\" + char)
        elif char == "\n":
            out.append("\\n")
        elif char == "\r":
            out.append("\\r")
        elif char == "\t":
            out.append("\\t")
        elif code < 0x20 or code == 0x7F:
            out.append(f"\\x{code:02x}")
        elif code > 0x7F:
            out.append(f"\\U{{{code:x}}}")
        else:
            out.append(char)
    out.append('"')
    return "".join(out)


def _java_string(text: str) -> str:
    """A Java string literal for ``text``, ASCII only. Line breaks are written as ``\\n`` and
    ``\\r``: javac turns ``\\u000a`` into a real line break before it reads the literal."""
    out = ['"']
    for unit in _utf16_units(text):
        if unit == 0x22 or unit == 0x5C:
            out.append("\\" + chr(unit))
        elif unit == 0x0A:
            out.append("\\n")
        elif unit == 0x0D:
            out.append("\\r")
        elif 0x20 <= unit < 0x7F:
            out.append(chr(unit))
        else:
            out.append(f"\\u{unit:04x}")
    out.append('"')
    return "".join(out)


def _utf16_units(text: str) -> list[int]:
    data = text.encode("utf-16-be", "surrogatepass")
    return [int.from_bytes(data[i : i + 2], "big") for i in range(0, len(data), 2)]


@dataclasses.dataclass(frozen=True, slots=True)
class Language:
    """A language name as contexts report it and the kernel spec that runs it.

    ``default_context`` names the language whose default context serves this one
    (typescript shares javascript's Deno kernel).
    """

    name: str
    kernel: str
    default_context: str
    dialect: Dialect = dataclasses.field(compare=False, repr=False)

    def setup(self, max_output: int) -> str | None:
        """Code run silently after every kernel start and restart, or ``None``.

        Python: past ``max_output`` characters of stdout/stderr in one cell, the cell gets a
        truncation note on stderr and an ``OutputLimitExceeded`` (a ``BaseException``, so
        ``except Exception`` does not swallow it); stopping the writer inside the kernel keeps
        a print loop from growing ipykernel's buffers until the sandbox runs out of memory.
        Java: the environment helpers ``set_env`` calls.
        """
        return self.dialect.setup(max_output)

    def set_env(self, env: Mapping[str, str]) -> str:
        """Code that sets ``env`` in the kernel and remembers what it replaces; raises
        ``ValueError`` for a variable the kernel cannot hold."""
        check_env(env)
        return self.dialect.set_env(env)

    def export_env(self, env: Mapping[str, str]) -> str:
        """Code that sets ``env`` for the rest of the kernel's life (sandbox-level envs)."""
        check_env(env)
        return self.dialect.export_env(env)

    def restore_env(self, env: Mapping[str, str]) -> str:
        """Code that undoes ``set_env(env)``."""
        return self.dialect.restore_env(env)


_LANGUAGES = {
    "python": Language("python", "python3", "python", _Python()),
    "javascript": Language("javascript", "deno", "javascript", _Deno()),
    "typescript": Language("typescript", "deno", "javascript", _Deno()),
    "bash": Language("bash", "bash", "bash", _Bash()),
    "r": Language("r", "ir", "r", _R()),
    "java": Language("java", "java", "java", _Java()),
}
_ALIASES = {
    "js": "javascript",
    "ts": "typescript",
    "py": "python",
    "python3": "python",
    "sh": "bash",
}


def languages() -> list[str]:
    """Every language name a request may use (aliases aside), sorted."""
    return sorted(_LANGUAGES)


def language_named(name: str | None) -> Language:
    """The language for a request's ``language`` (trimmed, lowercased, aliases resolved);
    ``None`` or empty means python. Raises ``UnknownLanguage``."""
    key = (name or DEFAULT_LANGUAGE).strip().lower() or DEFAULT_LANGUAGE
    key = _ALIASES.get(key, key)
    language = _LANGUAGES.get(key)
    if language is None:
        known = ", ".join(languages())
        raise UnknownLanguage(f"language {name!r} is not available here: use one of {known}")
    return language
