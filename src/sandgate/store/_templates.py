"""Durable records of templates: team templates, their builds, build logs and tags.

Kept beside ``_store.py`` so each reads on one screen; ``templates.builds`` and the catalog call
these methods and never see SQLAlchemy. A build's log is append-only and numbered from 0, so a
client polling with an offset (E2B's ``logsOffset``) never misses or repeats a line, across
gateway restarts too.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import bindparam, delete, func, or_, select, update

from sandgate.store._store import Store
from sandgate.store.models import Template, TemplateBuild, TemplateBuildLog, TemplateTag

__all__ = ["TemplateRecords"]


# Run by every create: built once (see _store.py).
_TEAMS_OWN = select(Template).where(
    Template.team_id == bindparam("team_id"),
    or_(Template.id == bindparam("ref"), Template.alias == bindparam("ref")),
)
_SHIPPED = select(Template).where(
    Template.team_id.is_(None),
    or_(Template.id == bindparam("ref"), Template.name == bindparam("ref")),
)


class TemplateRecords:
    def __init__(self, store: Store) -> None:
        self._store = store

    # -- templates ------------------------------------------------------------------------

    def visible(self, team_id: str) -> Sequence[Template]:
        """The team's own templates and the shipped ones, shipped first, then by name."""
        with self._store.session() as s:
            query = select(Template).where(
                or_(Template.team_id.is_(None), Template.team_id == team_id)
            )
            rows = s.scalars(query).all()
        return sorted(rows, key=lambda t: (t.team_id is not None, t.display_name))

    def find(self, team_id: str | None, ref: str) -> Template | None:
        """A template the team may use, by id, alias or shipped name (the team's own alias
        wins over a shipped name; ids are unique anyway)."""
        with self._store.session() as s:
            if team_id is not None:
                own = s.scalar(_TEAMS_OWN, {"team_id": team_id, "ref": ref})
                if own is not None:
                    return own
            return s.scalar(_SHIPPED, {"ref": ref})

    def find_any_team(self, ref: str) -> Template | None:
        """A team template of any team by alias or id (to tell "not yours" from "absent")."""
        with self._store.session() as s:
            return s.scalar(
                select(Template)
                .where(
                    Template.team_id.is_not(None), or_(Template.id == ref, Template.alias == ref)
                )
                .limit(1)
            )

    def get(self, template_id: str) -> Template | None:
        with self._store.session() as s:
            return s.get(Template, template_id)

    def add(self, template: Template) -> None:
        with self._store.session() as s:
            s.add(template)

    def update(self, template_id: str, **values: Any) -> Template | None:
        with self._store.session() as s:
            row = s.get(Template, template_id)
            if row is None:
                return None
            for name, value in values.items():
                setattr(row, name, value)
            return row

    def delete(self, template_id: str) -> None:
        """Removes the template with its builds, logs and tags."""
        with self._store.session() as s:
            builds = select(TemplateBuild.id).where(TemplateBuild.template_id == template_id)
            s.execute(delete(TemplateBuildLog).where(TemplateBuildLog.build_id.in_(builds)))
            s.execute(delete(TemplateBuild).where(TemplateBuild.template_id == template_id))
            s.execute(delete(TemplateTag).where(TemplateTag.template_id == template_id))
            s.execute(delete(Template).where(Template.id == template_id))

    # -- builds ---------------------------------------------------------------------------

    def add_build(self, build: TemplateBuild) -> None:
        with self._store.session() as s:
            s.add(build)

    def build(self, build_id: str) -> TemplateBuild | None:
        with self._store.session() as s:
            return s.get(TemplateBuild, build_id)

    def builds(self, template_id: str) -> Sequence[TemplateBuild]:
        """Newest first."""
        with self._store.session() as s:
            query = (
                select(TemplateBuild)
                .where(TemplateBuild.template_id == template_id)
                .order_by(TemplateBuild.created_at.desc())
            )
            return s.scalars(query).all()

    def builds_in(self, states: Sequence[str]) -> Sequence[TemplateBuild]:
        with self._store.session() as s:
            return s.scalars(select(TemplateBuild).where(TemplateBuild.state.in_(states))).all()

    def update_build(self, build_id: str, **values: Any) -> TemplateBuild | None:
        with self._store.session() as s:
            row = s.get(TemplateBuild, build_id)
            if row is None:
                return None
            for name, value in values.items():
                setattr(row, name, value)
            return row

    def count_builds(self, template_id: str) -> int:
        with self._store.session() as s:
            query = select(func.count()).where(TemplateBuild.template_id == template_id)
            return int(s.scalar(query) or 0)

    # -- logs -----------------------------------------------------------------------------

    def append_logs(
        self, build_id: str, entries: Sequence[tuple[datetime, str, str | None, str]]
    ) -> None:
        """Appends ``(time, level, step, message)`` lines in order, numbering them on."""
        if not entries:
            return
        with self._store.session() as s:
            last = s.scalar(
                select(func.max(TemplateBuildLog.seq)).where(TemplateBuildLog.build_id == build_id)
            )
            seq = -1 if last is None else int(last)
            for time, level, step, message in entries:
                seq += 1
                s.add(
                    TemplateBuildLog(
                        build_id=build_id,
                        seq=seq,
                        time=time,
                        level=level,
                        step=step,
                        message=message,
                    )
                )

    def logs(self, build_id: str, offset: int, limit: int) -> Sequence[TemplateBuildLog]:
        with self._store.session() as s:
            query = (
                select(TemplateBuildLog)
                .where(TemplateBuildLog.build_id == build_id, TemplateBuildLog.seq >= offset)
                .order_by(TemplateBuildLog.seq)
                .limit(limit)
            )
            return s.scalars(query).all()

    # -- tags -----------------------------------------------------------------------------

    def tags(self, template_id: str) -> Sequence[TemplateTag]:
        """Current assignments, by tag."""
        with self._store.session() as s:
            query = (
                select(TemplateTag)
                .where(TemplateTag.template_id == template_id, TemplateTag.removed_at.is_(None))
                .order_by(TemplateTag.tag)
            )
            return s.scalars(query).all()

    def tag_history(self, template_id: str, tag: str | None = None) -> Sequence[TemplateTag]:
        """Every assignment, newest first (``tag``: of that tag only)."""
        with self._store.session() as s:
            query = select(TemplateTag).where(TemplateTag.template_id == template_id)
            if tag is not None:
                query = query.where(TemplateTag.tag == tag)
            return s.scalars(query.order_by(TemplateTag.assigned_at.desc())).all()

    def tag(self, template_id: str, tag: str) -> TemplateTag | None:
        with self._store.session() as s:
            return s.scalar(
                select(TemplateTag).where(
                    TemplateTag.template_id == template_id,
                    TemplateTag.tag == tag,
                    TemplateTag.removed_at.is_(None),
                )
            )

    def assign_tags(
        self,
        template_id: str,
        build_id: str,
        tags: Sequence[str],
        ids: Sequence[str],
        now: datetime,
    ) -> None:
        """Points each tag at ``build_id`` (one transaction): the previous assignment of a tag
        is closed, a new one recorded with the matching id from ``ids``."""
        with self._store.session() as s:
            s.execute(
                update(TemplateTag)
                .where(
                    TemplateTag.template_id == template_id,
                    TemplateTag.tag.in_(list(tags)),
                    TemplateTag.removed_at.is_(None),
                )
                .values(removed_at=now)
            )
            for tag, assignment_id in zip(tags, ids, strict=True):
                s.add(
                    TemplateTag(
                        id=assignment_id,
                        template_id=template_id,
                        tag=tag,
                        build_id=build_id,
                        assigned_at=now,
                    )
                )

    def remove_tags(self, template_id: str, tags: Sequence[str], now: datetime) -> int:
        """Closes the current assignment of each tag; returns how many there were."""
        with self._store.session() as s:
            result = s.execute(
                update(TemplateTag)
                .where(
                    TemplateTag.template_id == template_id,
                    TemplateTag.tag.in_(list(tags)),
                    TemplateTag.removed_at.is_(None),
                )
                .values(removed_at=now)
            )
            return int(getattr(result, "rowcount", 0) or 0)
