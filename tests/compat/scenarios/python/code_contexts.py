"""Code contexts: create (language, cwd), list, isolation, restart, remove."""

from __future__ import annotations

from typing import Any

from _code import execution_dict
from _common import attempt, describe_error, run
from e2b_code_interpreter import Sandbox


def context_dict(context: Any) -> dict[str, Any]:
    return {"id": context.id, "language": context.language, "cwd": context.cwd}


def scenario(args: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    sbx = Sandbox.create()
    try:
        sbx.run_code("shared = 'default'")
        ctx = sbx.create_code_context(cwd="/tmp")
        out["created"] = context_dict(ctx)
        out["listed"] = [context_dict(c) for c in sbx.list_code_contexts()]
        out["isolated"] = execution_dict(sbx.run_code("shared", context=ctx))
        out["ctx_cwd"] = execution_dict(sbx.run_code("import os\nos.getcwd()", context=ctx))
        sbx.run_code("mine = 1", context=ctx)
        out["ctx_state"] = execution_dict(sbx.run_code("mine + 1", context=ctx))
        sbx.restart_code_context(ctx)
        out["restarted"] = execution_dict(sbx.run_code("mine", context=ctx))
        out["default_kept"] = execution_dict(sbx.run_code("shared"))

        js = sbx.create_code_context(language="javascript")
        out["js_created"] = context_dict(js)
        out["js_run"] = execution_dict(sbx.run_code("let k = 3; k * 3", context=js))

        sbx.remove_code_context(ctx)
        out["after_remove"] = [c.id for c in sbx.list_code_contexts()]
        out["run_removed"] = attempt(lambda: sbx.run_code("1", context=ctx))
        out["both"] = attempt(lambda: sbx.run_code("1", context=js, language="python"))
    except Exception as exc:
        out["unexpected"] = describe_error(exc)
        raise
    finally:
        out["cleanup"] = attempt(sbx.kill)
    return out


if __name__ == "__main__":
    run(scenario)
