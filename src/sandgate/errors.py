"""Sandgate's error tree. Every failure a user can see is one of these.

::

    SandgateError                 code             HTTP  Connect
    ├── InvalidRequest            invalid_request  400   invalid_argument
    │   ├── InvalidPath           invalid_path     400   invalid_argument
    │   └── LimitExceeded         limit_exceeded   400   invalid_argument
    ├── ConfigError               invalid_config   (start-up only)
    ├── Unauthenticated           unauthenticated  401   unauthenticated
    ├── Forbidden                 forbidden        403   permission_denied
    ├── NotFound                  not_found        404   not_found
    │   ├── SandboxNotFound       sandbox_not_found
    │   └── TemplateNotFound      template_not_found
    ├── Conflict                  conflict         409   already_exists
    ├── PayloadTooLarge           too_large        413   resource_exhausted
    ├── QuotaExceeded             quota_exceeded   429   resource_exhausted
    ├── RuntimeUnavailable        runtime_unavailable 503 unavailable
    ├── SandboxUnavailable        sandbox_unavailable 502 unavailable
    └── TemplateBuildError        template_build_failed 500 internal

Each error carries a stable ``code`` and a message that tells the reader what to do next.
Adapters (Docker, SQLAlchemy, the guest socket) translate their own failures into these where
they arise; the interfaces map them to HTTP/E2B/Connect in one table (``api/errors.py``).
Raising is not logging: the edge logs once.
"""

from __future__ import annotations

__all__ = [
    "ConfigError",
    "Conflict",
    "Forbidden",
    "InvalidPath",
    "InvalidRequest",
    "LimitExceeded",
    "NotFound",
    "PayloadTooLarge",
    "QuotaExceeded",
    "RuntimeUnavailable",
    "SandboxNotFound",
    "SandboxUnavailable",
    "SandgateError",
    "TemplateBuildError",
    "TemplateNotFound",
    "Unauthenticated",
]


class SandgateError(Exception):
    """Base of every error Sandgate reports to a user."""

    code: str = "internal"
    status: int = 500

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class InvalidRequest(SandgateError):
    code = "invalid_request"
    status = 400


class InvalidPath(InvalidRequest):
    code = "invalid_path"


class LimitExceeded(InvalidRequest):
    """A requested value is outside a configured limit; the message names the limit."""

    code = "limit_exceeded"


class ConfigError(SandgateError):
    """The configuration is invalid; the message names the offending key path."""

    code = "invalid_config"


class Unauthenticated(SandgateError):
    code = "unauthenticated"
    status = 401


class Forbidden(SandgateError):
    code = "forbidden"
    status = 403


class NotFound(SandgateError):
    code = "not_found"
    status = 404


class SandboxNotFound(NotFound):
    code = "sandbox_not_found"


class TemplateNotFound(NotFound):
    code = "template_not_found"


class Conflict(SandgateError):
    code = "conflict"
    status = 409


class PayloadTooLarge(SandgateError):
    code = "too_large"
    status = 413


class QuotaExceeded(SandgateError):
    """A per-team or global cap was reached; the message names the cap and its value."""

    code = "quota_exceeded"
    status = 429


class RuntimeUnavailable(SandgateError):
    """The sandbox runtime (e.g. the Docker engine) cannot be reached."""

    code = "runtime_unavailable"
    status = 503


class SandboxUnavailable(SandgateError):
    """The sandbox exists in the store but its guest does not answer (killed, crashed)."""

    code = "sandbox_unavailable"
    status = 502


class TemplateBuildError(SandgateError):
    code = "template_build_failed"
    status = 500
