import time
from tests.integration.tools.test_gateway import _run_in_thread


def test_dbg(tools_server, agent_sandbox):  # type: ignore[no-untyped-def]
    sid, run = agent_sandbox("approver-test")
    call = _run_in_thread(run, "kv set approved:1 yes")
    time.sleep(2)
    print(tools_server.cli("approvals", "list", "--json", check=False))
    import subprocess

    print(
        subprocess.run(
            ["ls", "-la", str(tools_server.home), str(tools_server.home / "approvals")],
            capture_output=True,
            text=True,
        ).stdout
    )
    call["thread"].join()
    print(call["result"])
    print(tools_server.log_text()[-3000:])
    assert False
