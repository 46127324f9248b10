"""The one way HTTP routes learn who is calling: the ``X-API-Key`` header, checked against the
store the application keeps in ``app.state.store`` (E2B's control plane and Sandgate's ``/v1``
use the same keys). E2B's other credential, an access token sent as ``Authorization: Bearer``
(``E2B_ACCESS_TOKEN``; the E2B CLI 1.x builds templates with it), is read as an API key when no
``X-API-Key`` is sent: Sandgate has no separate user tokens. Routes take ``caller: Caller``
(full keys only) or ``approver: ApproverCaller`` (also keys scoped to ``approvals``); a bad or
missing key answers 401, a scoped key on another route 403."""

from typing import Annotated

from fastapi import Depends, Request

from sandgate.access import Principal, authenticate_api_key
from sandgate.store import Store

__all__ = ["ApproverCaller", "Caller", "presented_key", "request_key"]


def presented_key(x_api_key: str | None, authorization: str | None) -> str | None:
    """The key a request presents: ``X-API-Key``, else an ``Authorization: Bearer`` token."""
    if x_api_key is not None or authorization is None:
        return x_api_key
    scheme, _, token = authorization.partition(" ")
    return token.strip() if scheme.lower() == "bearer" else None


def request_key(request: Request) -> str | None:
    """``presented_key`` of a request's headers. Read here rather than declared as ``Header``
    parameters: FastAPI analyses a dependency's parameters again for every route using it."""
    return presented_key(request.headers.get("x-api-key"), request.headers.get("authorization"))


def _principal(request: Request) -> Principal:
    store: Store = request.app.state.store
    return authenticate_api_key(store, request_key(request))


def _approver(request: Request) -> Principal:
    store: Store = request.app.state.store
    return authenticate_api_key(store, request_key(request), scope="approvals")


Caller = Annotated[Principal, Depends(_principal)]
#: A full key, or one scoped to ``approvals`` (an approver service's).
ApproverCaller = Annotated[Principal, Depends(_approver)]
