"""Errors raised while building templates.

    Exception
     └── TemplateBuildError          code = "template_build_failed"

Every message says what went wrong and what to do about it. The lead will re-parent
``TemplateBuildError`` under the project's error tree; its ``code`` is stable.
"""

from __future__ import annotations

__all__ = ["TemplateBuildError"]


class TemplateBuildError(Exception):
    """A template could not be built or inspected; the message says what to do next."""

    code = "template_build_failed"
