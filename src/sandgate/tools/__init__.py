"""The tool gateway: tools from config, the call pipeline, the sandbox socket and stubs."""

from sandgate.tools.build import build_gateway
from sandgate.tools.hook import AGENT_METADATA_KEY, SANDBOX_ENV, ToolGatewayHook
from sandgate.tools.pipeline import CallResult, Gateway
from sandgate.tools.registry import ToolRegistry
from sandgate.tools.tool import Tool, ToolContext

__all__ = [
    "AGENT_METADATA_KEY",
    "SANDBOX_ENV",
    "CallResult",
    "Gateway",
    "Tool",
    "ToolContext",
    "ToolGatewayHook",
    "ToolRegistry",
    "build_gateway",
]
