"""The E2B wire contract: control plane, envd data plane and code interpreter."""

from sandgate.api.e2b.control import CLIENT_ID, build_control_router
from sandgate.api.e2b.envd import build_envd_app
from sandgate.api.e2b.logs import build_logs_router
from sandgate.api.e2b.metrics import build_metrics_router
from sandgate.api.e2b.snapshots import build_snapshots_router
from sandgate.api.e2b.uploads import UploadLimits

__all__ = [
    "CLIENT_ID",
    "UploadLimits",
    "build_control_router",
    "build_envd_app",
    "build_logs_router",
    "build_metrics_router",
    "build_snapshots_router",
]
