"""R and Java kernels: state, envs, cwd, errors, contexts; a context run as another user."""

from __future__ import annotations

import json
import shlex
from typing import Any

from _code import execution_dict
from _common import attempt, describe_error, run
from e2b_code_interpreter import Context, Sandbox


def context_dict(context: Any) -> dict[str, Any]:
    return {"id": context.id, "language": context.language, "cwd": context.cwd}


def post_context(sbx: Any, body: dict[str, Any]) -> dict[str, Any]:
    """POST /contexts from inside the sandbox, with fields the SDK does not send (``user``)."""
    command = (
        "curl -s -o /tmp/ctx.json -w '%{http_code}' -X POST http://127.0.0.1:49999/contexts "
        f"-H 'Content-Type: application/json' -d {shlex.quote(json.dumps(body))}; "
        "echo; cat /tmp/ctx.json"
    )
    status, _, text = sbx.commands.run(command).stdout.partition("\n")
    return {"status": int(status), "body": text}


def scenario(args: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    sbx = Sandbox.create(envs={"SANDBOX_LEVEL": "sandbox"})
    try:
        out["r_first"] = execution_dict(sbx.run_code("x <- 41; x + 1", language="r"))
        out["r_state"] = execution_dict(
            sbx.run_code("x <- x + 1; cat('x is', x, '\\n'); x", language="R")
        )
        out["r_env"] = execution_dict(
            sbx.run_code(
                "paste(Sys.getenv('CELL_ONLY'), Sys.getenv('SANDBOX_LEVEL'), "
                "system('echo $CELL_ONLY', intern = TRUE))",
                language="r",
                envs={"CELL_ONLY": "cell"},
            )
        )
        out["r_env_gone"] = execution_dict(
            sbx.run_code("Sys.getenv('CELL_ONLY', 'unset')", language="r")
        )
        out["r_cwd"] = execution_dict(sbx.run_code("getwd()", language="r"))
        out["r_error"] = execution_dict(sbx.run_code("stop('r boom')", language="r"))

        out["java_first"] = execution_dict(sbx.run_code("int x = 40; x + 2", language="java"))
        out["java_state"] = execution_dict(
            sbx.run_code('System.out.println("x is " + x); x * 2', language="java")
        )
        out["java_env"] = execution_dict(
            sbx.run_code(
                'System.getenv("CELL_ONLY") + " " + System.getenv("SANDBOX_LEVEL") + " "'
                ' + System.getProperty("CELL_ONLY")',
                language="java",
                envs={"CELL_ONLY": "cell"},
            )
        )
        out["java_env_gone"] = execution_dict(
            sbx.run_code('String.valueOf(System.getenv("CELL_ONLY"))', language="java")
        )
        out["java_cwd"] = execution_dict(
            sbx.run_code('System.getProperty("user.dir")', language="java")
        )
        out["java_error"] = execution_dict(
            sbx.run_code('throw new IllegalStateException("java boom")', language="java")
        )

        # A sandbox has 512 MiB: R and Java kernels take about 120 MiB each, so the default
        # ones go before contexts of their own start.
        for context in sbx.list_code_contexts():
            if context.language in ("r", "java"):
                sbx.remove_code_context(context)
        r_ctx = sbx.create_code_context(language="r", cwd="/tmp")
        out["r_ctx"] = context_dict(r_ctx)
        out["r_ctx_cwd"] = execution_dict(sbx.run_code("getwd()", context=r_ctx))
        out["r_ctx_isolated"] = execution_dict(sbx.run_code("exists('x')", context=r_ctx))
        sbx.remove_code_context(r_ctx)
        java_ctx = sbx.create_code_context(language="java", cwd="/tmp/java-work")
        out["java_ctx"] = context_dict(java_ctx)
        out["java_ctx_cwd"] = execution_dict(
            sbx.run_code(
                'System.getProperty("user.dir") + " " + new java.io.File("x.txt")'
                ".getAbsolutePath()",
                context=java_ctx,
            )
        )
        out["listed"] = [context_dict(c) for c in sbx.list_code_contexts()]

        as_root = post_context(sbx, {"language": "python", "user": "root", "cwd": "/root"})
        out["root_ctx"] = as_root
        if as_root["status"] == 200:
            root_ctx = Context.from_json(json.loads(as_root["body"]))
            out["root_run"] = execution_dict(
                sbx.run_code("import os\nos.getuid(), os.getcwd()", context=root_ctx)
            )
        out["user_ctx_run"] = execution_dict(sbx.run_code("import os\nos.getuid()"))
        out["unknown_user"] = post_context(sbx, {"language": "python", "user": "nobody-here"})
    except Exception as exc:
        out["unexpected"] = describe_error(exc)
        raise
    finally:
        out["cleanup"] = attempt(sbx.kill)
    return out


if __name__ == "__main__":
    run(scenario)
