"""The code-interpreter server that runs inside ``code-interpreter-v1`` sandboxes.

It speaks the E2B code-interpreter contract (``shared/e2b-protocol.md`` §4) on
``127.0.0.1:49999``: ``GET /health``, ``POST /execute`` (an NDJSON event stream) and the
``/contexts`` CRUD. Each context is one Jupyter kernel (python via ipykernel, javascript
and typescript via Deno, bash via bash_kernel) driven through ``jupyter_client``. The
template build copies this package into the image (``TemplateSpec.vendored``); it runs
there on the image's ``python3`` with the standard library, Debian's ``jupyter_client``
and the stdlib-only ``sandgate.strictjson`` (vendored beside it) only, and nothing here is
imported by the gateway.

Trust boundary:

* Who is trusted: nobody inside the sandbox. The server runs as user ``user``, the same
  user as the code it executes, so sandbox code can read its memory, kill it or replace
  it; it is a convenience, not a security layer. Isolation is the sandbox's job (Docker
  runtime: read-only root, no network but loopback, no-new-privileges, pids/memory limits).
* Who may call it: anything that reaches ``127.0.0.1:49999`` inside the sandbox, i.e. code
  in the sandbox and the gateway's port proxy, which authenticates callers and strips the
  sandbox's credentials before forwarding (``sandgate.api.ports``). The server itself checks
  no token, as upstream does not.
* What it enforces, for the caller's sake rather than against the sandbox: request bodies
  are bounded (``MAX_BODY_BYTES``), each execution's output is bounded
  (``SANDGATE_INTERPRETER_MAX_OUTPUT``, default 16 MiB; beyond it the cell is interrupted
  and an ``OutputLimitExceeded`` error is reported), a caller that disconnects interrupts
  its cell, and a kernel that dies is restarted with a ``KernelDied`` error.
* What it does not do: sandbox CPU, memory and disk limits, network policy, or telling
  one caller from another; every caller may use and delete every context.
"""

__all__: list[str] = []
