"""The operator console: ``/ui``, server-rendered pages over the same services as the API
(sandboxes, approvals, audit, agent and workflow runs, templates), signed in with an API key.
See docs/console.md."""

from sandgate.console._app import ASSETS_DIR, Console

__all__ = ["ASSETS_DIR", "Console"]
