"""Configuration: one validated file plus environment overrides."""

from sandgate.config._load import load_config
from sandgate.config._model import (
    Config,
    DockerConfig,
    LimitsConfig,
    LoggingConfig,
    RuntimeConfig,
    ServerConfig,
    StoreConfig,
    TemplatesConfig,
)

__all__ = [
    "Config",
    "DockerConfig",
    "LimitsConfig",
    "LoggingConfig",
    "RuntimeConfig",
    "ServerConfig",
    "StoreConfig",
    "TemplatesConfig",
    "load_config",
]
