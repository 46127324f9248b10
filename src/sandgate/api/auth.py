"""The one way HTTP routes learn who is calling: the ``X-API-Key`` header, checked against the
store the application keeps in ``app.state.store`` (E2B's control plane and Sandgate's ``/v1``
use the same keys). Routes take ``caller: Caller`` (full keys only) or ``approver:
ApproverCaller`` (also keys scoped to ``approvals``); a bad or missing key answers 401, a
scoped key on another route 403."""

from typing import Annotated

from fastapi import Depends, Header, Request

from sandgate.access import Principal, authenticate_api_key
from sandgate.store import Store

__all__ = ["ApproverCaller", "Caller"]


def _principal(
    request: Request,
    x_api_key: Annotated[str | None, Header(alias="X-API-Key")] = None,
) -> Principal:
    store: Store = request.app.state.store
    return authenticate_api_key(store, x_api_key)


def _approver(
    request: Request,
    x_api_key: Annotated[str | None, Header(alias="X-API-Key")] = None,
) -> Principal:
    store: Store = request.app.state.store
    return authenticate_api_key(store, x_api_key, scope="approvals")


Caller = Annotated[Principal, Depends(_principal)]
#: A full key, or one scoped to ``approvals`` (an approver service's).
ApproverCaller = Annotated[Principal, Depends(_approver)]
