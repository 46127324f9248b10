"""The workload identity issuer's public documents (``sandgate.identity``): the OpenID
discovery document and the JWKS, so relying parties (a cloud's STS, a Kubernetes API server,
any OIDC verifier) can check the tokens the egress proxy puts in requests.

Unauthenticated on purpose: they hold public keys only, and relying parties fetch them
without credentials. Cached briefly by clients (a rotated key shows within minutes).
"""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from sandgate.identity import JWKS_PATH, OPENID_CONFIGURATION_PATH, Issuer

__all__ = ["build_identity_router"]

_CACHE = {"Cache-Control": "public, max-age=300"}


def build_identity_router(issuer: Issuer) -> APIRouter:
    router = APIRouter()

    @router.get(OPENID_CONFIGURATION_PATH)
    async def openid_configuration() -> JSONResponse:
        return JSONResponse(issuer.discovery(), headers=_CACHE)

    @router.get(JWKS_PATH)
    async def jwks() -> JSONResponse:
        return JSONResponse(issuer.jwks(), headers=_CACHE)

    return router
