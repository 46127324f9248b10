"""Sandgate's error tree. Every failure a user can see is one of these.

::

    SandgateError                 code             HTTP  Connect
    ├── InvalidRequest            invalid_request  400   invalid_argument
    │   ├── InvalidPath           invalid_path     400   invalid_argument
    │   ├── InvalidJson           invalid_json     400   invalid_argument  (strictjson refused it)
    │   ├── InvalidUrlEncoding    invalid_url_encoding 400 invalid_argument (bad %-escape)
    │   ├── InvalidPort           invalid_port     400   invalid_argument  (routing: not 1..65535)
    │   ├── LimitExceeded         limit_exceeded   400   invalid_argument
    │   ├── InvalidWorkflow       invalid_workflow 400   invalid_argument  (names the step)
    │   └── InvalidArguments      invalid_arguments 400  invalid_argument  (tool call schema)
    ├── ConfigError               invalid_config   (start-up only)
    ├── Unauthenticated           unauthenticated  401   unauthenticated
    ├── Forbidden                 forbidden        403   permission_denied
    │   └── PolicyDenied          policy_denied    403   (tool call: a rule, or no rule)
    │       └── ApprovalDenied    approval_denied  403   (a person said no, or nobody answered)
    ├── NotFound                  not_found        404   not_found
    │   ├── SandboxNotFound       sandbox_not_found
    │   ├── TemplateNotFound      template_not_found
    │   └── SnapshotNotFound      snapshot_not_found
    ├── Conflict                  conflict         409   already_exists
    ├── PayloadTooLarge           too_large        413   resource_exhausted
    ├── DiskFull                  disk_full        507   resource_exhausted
    ├── QuotaExceeded             quota_exceeded   429   resource_exhausted
    │   ├── RateLimited           rate_limited     429   (tool call rate limit)
    │   └── BudgetExceeded        budget_exceeded  429   (a run's or sandbox's tool-call budget)
    ├── RuntimeUnavailable        runtime_unavailable 503 unavailable
    │   └── RuntimeBelowFloor     runtime_below_floor 503 (kernel/runtime below a patched floor)
    ├── SandboxUnavailable        sandbox_unavailable 502 unavailable
    ├── TemplateBuildError        template_build_failed 500 internal
    ├── SnapshotDamaged           snapshot_damaged 500  internal  (a saved layer cannot be read)
    ├── ToolFailed                tool_failed      502   unavailable  (the tool ran and failed)
    │   └── ToolTimeout           tool_timeout     504   deadline_exceeded
    ├── AuditUnavailable          audit_unavailable 503  unavailable  (calls fail closed)
    │   └── AuditTampered         audit_tampered   503   (the log disagrees with its anchor)
    ├── ModelUnavailable          model_unavailable 502  unavailable  (agent: no model answered)
    ├── NotImplementedFeature     not_implemented  501   unimplemented (an E2B endpoint
    │                                                     not served here, feature named)
    └── GuestError                (the code, status and Connect code of the guest's answer:
        │                          see below; the guest speaks Connect codes itself)
        └── GuestUnavailable      sandbox_unavailable 502 unavailable (no usable connection)

Each error carries a stable ``code``, an HTTP ``status`` and a Connect ``connect`` code, each
declared once, on its class; the table above is what the classes say
(``tests/unit/test_error_tree.py`` holds them to it). A guest's answer carries a Connect code
(``sandgate.guest.protocol.ERROR_CODES``); :func:`guest_kind` is the one table that turns it
into an error of this tree, so a guest failure has the same code and status on every edge.
:data:`CONNECT_STATUS` is the Connect protocol's own code → HTTP status table, which the envd
edge answers RPC errors with. Where an error's HTTP status and its Connect code's status
differ (``disk_full`` is 507 over HTTP, as E2B answers a full disk on ``/files``, and
``resource_exhausted`` 429 over Connect) the two protocols differ on purpose, and both are
derived from the class. Adapters (Docker, SQLAlchemy, the guest socket) translate their own
failures into these where they arise; the edges read ``status`` and ``connect`` and nothing
else (``api/errors.py``, ``api/e2b/connect.py``). Raising is not logging: the edge logs once.
"""

from __future__ import annotations

import copy
from typing import Final

__all__ = [
    "CONNECT_STATUS",
    "ApprovalDenied",
    "AuditTampered",
    "AuditUnavailable",
    "BudgetExceeded",
    "ConfigError",
    "Conflict",
    "DiskFull",
    "Forbidden",
    "GuestError",
    "GuestUnavailable",
    "InvalidArguments",
    "InvalidJson",
    "InvalidPath",
    "InvalidPort",
    "InvalidRequest",
    "InvalidUrlEncoding",
    "InvalidWorkflow",
    "LimitExceeded",
    "ModelUnavailable",
    "NotFound",
    "NotImplementedFeature",
    "PayloadTooLarge",
    "PolicyDenied",
    "QuotaExceeded",
    "RateLimited",
    "RuntimeBelowFloor",
    "RuntimeUnavailable",
    "SandboxNotFound",
    "SandboxUnavailable",
    "SandgateError",
    "SnapshotDamaged",
    "SnapshotNotFound",
    "TemplateBuildError",
    "TemplateNotFound",
    "ToolFailed",
    "ToolTimeout",
    "Unauthenticated",
    "error_for_code",
    "guest_kind",
]

#: The Connect protocol's code → HTTP status table (its specification's, which connect-go,
#: envd's server, uses too); a Connect error response carries the status of its code.
CONNECT_STATUS: Final[dict[str, int]] = {
    "canceled": 499,
    "unknown": 500,
    "invalid_argument": 400,
    "deadline_exceeded": 504,
    "not_found": 404,
    "already_exists": 409,
    "permission_denied": 403,
    "resource_exhausted": 429,
    "failed_precondition": 400,
    "aborted": 409,
    "out_of_range": 400,
    "unimplemented": 501,
    "internal": 500,
    "unavailable": 503,
    "data_loss": 500,
    "unauthenticated": 401,
}


class SandgateError(Exception):
    """Base of every error Sandgate reports to a user."""

    code: str = "internal"
    status: int = 500
    #: The Connect code of this error (a key of :data:`CONNECT_STATUS`), for the envd edge.
    connect: str = "internal"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def reworded(self, message: str) -> SandgateError:
        """The same error (class, code, status) with another message, e.g. redacted."""
        error = copy.copy(self)
        error.message = message
        error.args = (message,)
        return error


class InvalidRequest(SandgateError):
    code = "invalid_request"
    status = 400
    connect = "invalid_argument"


class InvalidPath(InvalidRequest):
    code = "invalid_path"


class InvalidJson(InvalidRequest):
    """A JSON document broke a rule of ``sandgate.strictjson`` (duplicate key, ``NaN``, lone
    surrogate, invalid UTF-8, too deep, integer out of range); the message says which."""

    code = "invalid_json"


class InvalidUrlEncoding(InvalidRequest):
    """A request path or query has a malformed percent-escape (``%2``, ``%zz``) or escapes
    bytes that are not UTF-8 (overlong forms, surrogates); nothing is decoded leniently."""

    code = "invalid_url_encoding"


class InvalidPort(InvalidRequest):
    """A sandbox port in a routing form is not a canonical decimal in 1..65535."""

    code = "invalid_port"


class LimitExceeded(InvalidRequest):
    """A requested value is outside a configured limit; the message names the limit."""

    code = "limit_exceeded"


class InvalidWorkflow(InvalidRequest):
    """A workflow sent through the API cannot run as written (unknown step, cycle, bad
    reference, retries on a step that is not idempotent); the message names the step."""

    code = "invalid_workflow"


class ConfigError(SandgateError):
    """The configuration is invalid; the message names the offending key path."""

    code = "invalid_config"


class Unauthenticated(SandgateError):
    code = "unauthenticated"
    status = 401
    connect = "unauthenticated"


class Forbidden(SandgateError):
    code = "forbidden"
    status = 403
    connect = "permission_denied"


class NotFound(SandgateError):
    code = "not_found"
    status = 404
    connect = "not_found"


class SandboxNotFound(NotFound):
    code = "sandbox_not_found"


class TemplateNotFound(NotFound):
    code = "template_not_found"


class SnapshotNotFound(NotFound):
    """No snapshot of the caller's team has this id or name (another team's looks the same)."""

    code = "snapshot_not_found"


class Conflict(SandgateError):
    code = "conflict"
    status = 409
    connect = "already_exists"


class PayloadTooLarge(SandgateError):
    """A request body is larger than a configured limit; refused as soon as the limit is
    crossed, while the body is still arriving. The message names the limit."""

    code = "too_large"
    status = 413
    connect = "resource_exhausted"


class DiskFull(SandgateError):
    """A write does not fit the sandbox's disk (full, quota used up, or a file larger than the
    disk), or a snapshot does not fit the gateway's disk. E2B answers 507 here; its SDKs raise
    ``NotEnoughSpaceException``."""

    code = "disk_full"
    status = 507
    connect = "resource_exhausted"


class QuotaExceeded(SandgateError):
    """A per-team or global cap was reached; the message names the cap and its value."""

    code = "quota_exceeded"
    status = 429
    connect = "resource_exhausted"


class RuntimeUnavailable(SandgateError):
    """The sandbox runtime (e.g. the Docker engine) cannot be reached."""

    code = "runtime_unavailable"
    status = 503
    connect = "unavailable"


class RuntimeBelowFloor(RuntimeUnavailable):
    """The host's kernel or container runtime is below a patched floor (known, fixed escapes)
    and no exception accepts it; the message names the component, the version found, the
    floor, the CVEs and the fix. No sandbox is started on it."""

    code = "runtime_below_floor"


class SandboxUnavailable(SandgateError):
    """The sandbox exists in the store but its guest does not answer (killed, crashed)."""

    code = "sandbox_unavailable"
    status = 502
    connect = "unavailable"


class TemplateBuildError(SandgateError):
    code = "template_build_failed"
    status = 500


class SnapshotDamaged(SandgateError):
    """A saved sandbox disk (a snapshot, or the layer of a sandbox paused to disk) cannot be
    read back: its archive is missing, truncated or breaks a rule of ``runtimes._layer``."""

    code = "snapshot_damaged"
    status = 500


# -- tool gateway --------------------------------------------------------------------------


class InvalidArguments(InvalidRequest):
    """A tool call's arguments do not match the tool's schema; the message names the field."""

    code = "invalid_arguments"


class PolicyDenied(Forbidden):
    """The policy denied a tool call (a deny rule, or no rule: default deny)."""

    code = "policy_denied"


class ApprovalDenied(PolicyDenied):
    """A call that needed approval was denied by a person or timed out waiting."""

    code = "approval_denied"


class RateLimited(QuotaExceeded):
    """A tool call rate limit was reached; the same call may succeed later."""

    code = "rate_limited"


class BudgetExceeded(QuotaExceeded):
    """A tool-call budget is spent: the agent run's (``budgets.max_tool_calls``, or its wall
    clock) or the sandbox's (``policy.budget_per_sandbox``). Unlike a rate limit, waiting does
    not help; the message names the budget."""

    code = "budget_exceeded"


class ToolFailed(SandgateError):
    """The tool ran and reported a failure (non-zero exit, HTTP error, exception)."""

    code = "tool_failed"
    status = 502
    connect = "unavailable"


class ToolTimeout(ToolFailed):
    """The tool did not finish within its timeout and was killed."""

    code = "tool_timeout"
    status = 504
    connect = "deadline_exceeded"


class AuditUnavailable(SandgateError):
    """The audit log cannot be written; calls fail closed until it can."""

    code = "audit_unavailable"
    status = 503
    connect = "unavailable"


class AuditTampered(AuditUnavailable):
    """The audit log's head disagrees with its anchor (the store's index, a signed
    checkpoint): records were removed, rolled back or rewritten. Nothing more is appended
    until an operator has looked (``sandgate audit verify``, then ``sandgate audit
    recover``); the message names the first bad record."""

    code = "audit_tampered"


# -- agents --------------------------------------------------------------------------------


class ModelUnavailable(SandgateError):
    """No model of an agent answered (each was rate limited, failing or cooling down); the
    message says what happened to each."""

    code = "model_unavailable"
    status = 502
    connect = "unavailable"


class NotImplementedFeature(SandgateError):
    """An E2B API endpoint this server does not serve; the message names the feature (never
    a bare 404, which SDKs would read as "no such sandbox")."""

    code = "not_implemented"
    status = 501
    connect = "unimplemented"


# -- the sandbox's guest --------------------------------------------------------------------


class GuestError(SandgateError):
    """The sandbox's guest refused or failed an operation.

    ``connect`` is the code the guest answered (one of ``guest.protocol.ERROR_CODES``, a Connect
    code, passed on unchanged by the envd edge) and ``reason``, when the guest gave one, one of
    ``guest.protocol.ERROR_REASONS``. ``code`` and ``status`` are those of the error of this
    tree that the guest's code and reason stand for (:func:`guest_kind`), so a guest failure
    that reaches an HTTP edge reads as that error would."""

    def __init__(self, code: str, message: str, reason: str | None = None) -> None:
        super().__init__(message)
        kind = guest_kind(code, reason)
        self.connect = code
        self.reason = reason
        self.code = kind.code
        self.status = kind.status

    def __str__(self) -> str:
        return f"{self.connect}: {self.message}"


class GuestUnavailable(GuestError):
    """The guest could not be reached, or dropped the connection before answering (the sandbox
    stopped, died or is being killed)."""

    def __init__(self, message: str) -> None:
        super().__init__("unavailable", message)


#: The guest's code → the error of this tree it stands for. ``failed_precondition`` (a process
#: that has no stdin, a signal to one that ended) is the caller's mistake, as in E2B.
_GUEST_KINDS: Final[dict[str, type[SandgateError]]] = {
    "invalid_argument": InvalidRequest,
    "failed_precondition": InvalidRequest,
    "unauthenticated": Unauthenticated,
    "permission_denied": Forbidden,
    "not_found": NotFound,
    "already_exists": Conflict,
    "resource_exhausted": QuotaExceeded,
    "unavailable": SandboxUnavailable,
}
#: A guest's ``reason`` names the condition more precisely than its code.
_GUEST_REASONS: Final[dict[str, type[SandgateError]]] = {
    "disk_full": DiskFull,
    "too_large": LimitExceeded,
}


def guest_kind(code: str, reason: str | None = None) -> type[SandgateError]:
    """The error of this tree a guest's answer (its Connect ``code`` and ``reason``) stands
    for; any other code (``internal``, ``deadline_exceeded``, ``unimplemented``) is an internal
    error: the guest failed, not the caller."""
    return _GUEST_REASONS.get(reason or "") or _GUEST_KINDS.get(code, SandgateError)


def error_for_code(code: str, message: str, status: int | None = None) -> SandgateError:
    """The error of the tree whose code is ``code`` (e.g. to replay a recorded failure with its
    own class, code and status); an unknown code keeps its text as the instance's code."""
    found: type[SandgateError] | None = None
    pending: list[type[SandgateError]] = [SandgateError]
    while pending:
        cls = pending.pop()
        if issubclass(cls, GuestError):
            continue  # its code is that of the guest's answer, not of the class
        if cls.code == code:
            found = cls
            break
        pending.extend(cls.__subclasses__())
    if found is not None:
        return found(message)
    error = SandgateError(message)
    error.code = code
    if status is not None:
        error.status = status
    return error
