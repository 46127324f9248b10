"""The Telegram channel: agents reachable from a Telegram bot, approvals as inline buttons.

One long-polling loop (``getUpdates``) per server, through python-telegram-bot's ``Bot`` (the
Bot API client; the loop and its offset are ours, so the offset can live in the store). A text
message from an allowed user starts a run of the chat's agent in the chat's session (kept in
the store, so a conversation survives a restart); the final answer is the reply, split at the
message limit, followed by one line per code execution and tool call. While a run works the
chat shows "typing…". ``/new`` starts a new session, ``/cancel`` cancels the running run.
When a tool call of the run waits for approval, the chat gets the request with Approve and
Deny buttons; a press decides it through the approvals service, and the message is edited to
show the decision (or that the approval expired).

Trust: Telegram authenticates users; their numeric ids are what ``allowed_users`` and
``approvers`` list. Anyone else who writes to the bot gets a refusal, logged and audited, and
starts nothing; a press from anyone who is not an approver of the approval's agent decides
nothing. The bot shows only what the gateway already redacted (run answers and output,
approval arguments).

Crash safety: each update's id is recorded in the store before the update is acted on, and
polling resumes after the recorded id, so a restart never acts on an update twice. An update
being acted on when the process died is not retried (a run may have had side effects); a run
it started is reported failed by the runner ("send the message again").
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import structlog
from telegram import (
    Bot,
    CallbackQuery,
    InlineKeyboardButton,
    InlineKeyboardMarkup,
    Message,
    ReplyParameters,
    Update,
)
from telegram.constants import ChatAction
from telegram.error import InvalidToken, NetworkError, RetryAfter, TelegramError
from telegram.request import HTTPXRequest

from sandgate._tasks import cancel_and_wait
from sandgate.access import Principal
from sandgate.agents import AgentRunner
from sandgate.approvals import ApprovalService, ApprovalState
from sandgate.channels._text import (
    approval_text,
    decision_text,
    outcome_text,
    split_message,
    step_line,
)
from sandgate.config import TelegramConfig
from sandgate.errors import Conflict, NotFound, SandgateError
from sandgate.store import ChannelRecords, Store

__all__ = ["TelegramChannel"]

log = structlog.get_logger("sandgate.channels.telegram")

CHANNEL = "telegram"
#: Telegram shows a chat action for about five seconds; it is sent again this often.
TYPING_EVERY_S = 4.0
REFUSAL = (
    "Sorry, this bot answers only the people its operator allowed. "
    "Ask them to add your Telegram user id ({user}) to channels.telegram.allowed_users."
)
_UPDATES = ["message", "callback_query"]
#: Tries to send one part of an answer while Telegram is unreachable (1 + 2 + 4 + 8 s apart).
_DELIVERY_ATTEMPTS = 5


@dataclass
class _Posted:
    """An approval request shown in a chat, until it is decided or expires."""

    chat_id: int
    message_id: int
    text: str


class _TokenFilter(logging.Filter):
    """Keeps the bot token out of log lines: the Bot API's URLs carry it, and httpx logs every
    request's URL at INFO."""

    def __init__(self, token: str) -> None:
        super().__init__()
        self._token = token

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if self._token in message:
            record.msg = message.replace(self._token, "<token>")
            record.args = ()
        return True


class TelegramChannel:
    """Started and stopped by the server's lifespan; never raises out of its loop."""

    def __init__(
        self,
        settings: TelegramConfig,
        runner: AgentRunner,
        approvals: ApprovalService,
        store: Store,
        *,
        token: Callable[[], str | None],
        audit: Callable[[dict[str, Any]], None],
    ) -> None:
        self._settings = settings
        self._runner = runner
        self._approvals = approvals
        self._store = store
        self._records = ChannelRecords(store)
        self._token = token
        self._audit = audit
        self._task: asyncio.Task[None] | None = None
        self._bot: Bot | None = None
        self._team_id: str | None = None
        #: Per chat: its run in progress and the task following it.
        self._runs: dict[int, tuple[str, asyncio.Task[None]]] = {}
        self._posted: dict[str, _Posted] = {}
        #: Background work started by a message (cancelling a run), kept until done.
        self._chores: set[asyncio.Task[None]] = set()
        self._filter: _TokenFilter | None = None

    # -- lifecycle ------------------------------------------------------------------------

    async def start(self) -> None:
        """Starts polling in the background (connecting, with backoff, until it works)."""
        self._task = asyncio.create_task(self._serve(), name="telegram-channel")

    async def stop(self) -> None:
        """Stops polling and following runs (the runs themselves are the runner's)."""
        following = [task for _, task in self._runs.values()]
        tasks = [t for t in (self._task, *following, *self._chores) if t is not None]
        for task in tasks:
            task.cancel()
        for task in tasks:
            await cancel_and_wait(task)
        if self._bot is not None:
            with contextlib.suppress(TelegramError, RuntimeError):
                await self._bot.shutdown()
        if self._filter is not None:
            for name in ("httpx", "telegram"):
                logging.getLogger(name).removeFilter(self._filter)

    # -- polling --------------------------------------------------------------------------

    async def _serve(self) -> None:
        backoff = 1.0
        while True:
            try:
                bot = await self._connect()
                backoff = 1.0
                await self._poll(bot)
            except asyncio.CancelledError:
                raise
            except RetryAfter as exc:
                wait = exc.retry_after
                delay = wait.total_seconds() if not isinstance(wait, int) else float(wait)
                log.warning("telegram.rate_limited", retry_in_s=delay)
                await asyncio.sleep(delay)
            except InvalidToken:
                log.error(
                    "telegram.token_refused",
                    why="Telegram refused the bot token; check channels.telegram.token_env "
                    "(or token_secret) holds the token @BotFather gave",
                    retry_in_s=backoff,
                )
                await self._drop_bot()
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, self._settings.max_backoff_s)
            except (NetworkError, TelegramError, SandgateError) as exc:
                log.error(
                    "telegram.unavailable",
                    api_url=self._settings.api_url,
                    error=str(exc),
                    retry_in_s=backoff,
                )
                await self._drop_bot()
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, self._settings.max_backoff_s)
            except Exception:  # our bug: logged, then retried, never the server's end
                log.exception("telegram.crashed", retry_in_s=backoff)
                await self._drop_bot()
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, self._settings.max_backoff_s)

    async def _connect(self) -> Bot:
        if self._bot is not None:
            return self._bot
        token = self._token()
        if not token:
            raise InvalidToken("no bot token")
        if self._filter is None:
            self._filter = _TokenFilter(token)
            for name in ("httpx", "telegram"):
                logging.getLogger(name).addFilter(self._filter)
        api = self._settings.api_url
        bot = Bot(
            token,
            base_url=f"{api}/bot",
            base_file_url=f"{api}/file/bot",
            request=HTTPXRequest(connection_pool_size=8),
            get_updates_request=HTTPXRequest(),
        )
        await bot.initialize()  # getMe: a refused token raises InvalidToken here
        self._bot = bot
        log.info("telegram.connected", bot=bot.username, api_url=api)
        return bot

    async def _drop_bot(self) -> None:
        bot, self._bot = self._bot, None
        if bot is not None:
            with contextlib.suppress(TelegramError, RuntimeError):
                await bot.shutdown()

    async def _poll(self, bot: Bot) -> None:
        cursor = f"{CHANNEL}:{bot.id}"
        while True:
            last = self._records.position(cursor)
            updates = await bot.get_updates(
                offset=None if last is None else last + 1,
                timeout=self._settings.poll_timeout_s,
                allowed_updates=_UPDATES,
            )
            for update in updates:
                # SECURITY/crash safety: recorded before it is acted on (at most once).
                self._records.advance(cursor, update.update_id)
                try:
                    await self._handle(bot, update)
                except (TelegramError, SandgateError) as exc:
                    log.error("telegram.update_failed", update=update.update_id, error=str(exc))

    # -- updates --------------------------------------------------------------------------

    async def _handle(self, bot: Bot, update: Update) -> None:
        if update.callback_query is not None:
            await self._press(bot, update.callback_query)
            return
        message = update.message
        if message is None or message.from_user is None or message.text is None:
            return
        user = message.from_user.id
        if user not in self._settings.allowed_users:
            self._refuse(user, message.chat_id, "message")
            await bot.send_message(message.chat_id, REFUSAL.format(user=user))
            return
        text = message.text.strip()
        command = text.split(maxsplit=1)[0].split("@", 1)[0].lower() if text else ""
        if command == "/new":
            await self._new_session(bot, message)
        elif command == "/cancel":
            await self._cancel(bot, message, user)
        elif command == "/start":
            agent = self._settings.agent_for(message.chat_id)
            await bot.send_message(
                message.chat_id,
                f"Hello! Messages here go to agent {agent}. /new starts over, "
                "/cancel stops the running task.",
            )
        elif text:
            await self._start_run(bot, message, text)

    def _refuse(self, user: int, chat_id: int, what: str) -> None:
        log.warning("telegram.refused", user=user, chat=chat_id, what=what)
        try:
            self._audit(
                {
                    "event": "channel.refused",
                    "channel": CHANNEL,
                    "outcome": "refused",
                    "user": user,
                    "chat": chat_id,
                    "what": what,
                }
            )
        except SandgateError as exc:
            log.error("telegram.audit_failed", error=exc.message)

    def _principal(self, key: str = CHANNEL) -> Principal:
        if self._team_id is None:
            team = self._store.get_or_create_team(
                self._settings.team, "team_" + secrets.token_hex(8), datetime.now(UTC)
            )
            self._team_id = team.id
        return Principal(team_id=self._team_id, api_key_id=key)

    def _session_for(self, chat_id: int) -> str:
        """The chat's session with its agent, opened on first use (or after /new)."""
        agent = self._settings.agent_for(chat_id)
        row = self._records.chat(CHANNEL, str(chat_id))
        if row is not None and row.session_id and row.agent_id == agent:
            with contextlib.suppress(NotFound):
                self._runner.session(self._principal(), row.session_id)
                return row.session_id
        session = self._runner.open_session(self._principal(), agent)
        self._records.set_chat(CHANNEL, str(chat_id), agent, session.id)
        return session.id

    async def _new_session(self, bot: Bot, message: Message) -> None:
        chat_id = message.chat_id
        if chat_id in self._runs:
            await bot.send_message(chat_id, "A task is still running; /cancel it first.")
            return
        row = self._records.chat(CHANNEL, str(chat_id))
        if row is not None and row.session_id:
            with contextlib.suppress(NotFound, Conflict):
                await self._runner.end_session(self._principal(), row.session_id)
        self._records.set_chat(CHANNEL, str(chat_id), self._settings.agent_for(chat_id), None)
        await bot.send_message(chat_id, "Started a new conversation.")

    async def _cancel(self, bot: Bot, message: Message, user: int) -> None:
        running = self._runs.get(message.chat_id)
        if running is None:
            await bot.send_message(message.chat_id, "Nothing is running.")
            return
        # In the background: the run's code is interrupted first, and the bot keeps answering
        # meanwhile; the run's end ("Cancelled.") is reported by the task following it.
        task = asyncio.create_task(self._cancel_run(running[0], f"telegram:{user}"))
        self._chores.add(task)
        task.add_done_callback(self._chores.discard)

    async def _cancel_run(self, run_id: str, by: str) -> None:
        with contextlib.suppress(Conflict, NotFound):
            await self._runner.cancel(self._principal(), run_id, by=by)

    async def _start_run(self, bot: Bot, message: Message, text: str) -> None:
        chat_id = message.chat_id
        if chat_id in self._runs:
            await bot.send_message(
                chat_id, "Still working on your last message; wait for it or /cancel it."
            )
            return
        agent = self._settings.agent_for(chat_id)
        session_id = self._session_for(chat_id)
        try:
            run = await self._runner.submit(self._principal(), agent, text, session_id)
        except SandgateError as exc:  # e.g. a run started over the API holds the session
            await bot.send_message(chat_id, f"Could not start: {exc.message}")
            return
        log.info("telegram.run_started", chat=chat_id, run=run.id, agent=agent)
        task = asyncio.create_task(
            self._follow(bot, chat_id, run.id, message.message_id), name=f"telegram-{run.id}"
        )
        self._runs[chat_id] = (run.id, task)
        task.add_done_callback(lambda _: self._forget(chat_id, run.id))

    def _forget(self, chat_id: int, run_id: str) -> None:
        if self._runs.get(chat_id, ("", None))[0] == run_id:
            del self._runs[chat_id]

    # -- following a run ------------------------------------------------------------------

    async def _follow(self, bot: Bot, chat_id: int, run_id: str, reply_to: int) -> None:
        """Shows typing while the run works, its approvals as they come, then its answer."""
        typing = asyncio.create_task(self._typing(bot, chat_id))
        steps: list[str] = []
        asked: list[str] = []
        try:
            async for event in self._runner.events(run_id):
                line = step_line(event.type, event.data)
                if line is not None:
                    steps.append(line)
                elif event.type == "approval.required":
                    asked.append(event.data["approval"])
                    await self._ask(bot, chat_id, event.data)
                elif event.type in ("run.completed", "run.failed"):
                    typing.cancel()
                    # The chat is free once its run is: its next message may start one at once.
                    self._runs.pop(chat_id, None)
                    await self._settle(bot, asked)
                    text = outcome_text(event.type, event.data, steps)
                    for n, part in enumerate(split_message(text)):
                        await self._deliver(bot, chat_id, part, reply_to if n == 0 else None)
        except TelegramError as exc:
            log.error("telegram.reply_failed", chat=chat_id, run=run_id, error=str(exc))
        except Exception:  # our bug: logged; the run itself is the runner's and goes on
            log.exception("telegram.follow_crashed", chat=chat_id, run=run_id)
        finally:
            typing.cancel()

    async def _deliver(self, bot: Bot, chat_id: int, text: str, reply_to: int | None) -> None:
        """Sends one part of an answer, retrying while Telegram is unreachable or asks to
        wait (the answer is the point of the run); a refusal (blocked bot, bad chat) is not
        retried. The run's answer stays in its record either way."""
        reply = None
        if reply_to is not None:  # the question may have been deleted meanwhile
            reply = ReplyParameters(message_id=reply_to, allow_sending_without_reply=True)
        for attempt in range(_DELIVERY_ATTEMPTS):
            try:
                await bot.send_message(chat_id, text, reply_parameters=reply)
                return
            except RetryAfter as exc:
                wait = exc.retry_after
                await asyncio.sleep(wait if isinstance(wait, int) else wait.total_seconds())
            except NetworkError:
                if attempt == _DELIVERY_ATTEMPTS - 1:
                    raise
                await asyncio.sleep(2**attempt)

    async def _typing(self, bot: Bot, chat_id: int) -> None:
        while True:
            with contextlib.suppress(TelegramError):
                await bot.send_chat_action(chat_id, ChatAction.TYPING)
            await asyncio.sleep(TYPING_EVERY_S)

    async def _ask(self, bot: Bot, chat_id: int, data: dict[str, Any]) -> None:
        approval_id = str(data["approval"])
        text = approval_text(data)
        agent = self._agent_of(approval_id)
        markup = None
        if self._settings.approvers.get(agent or ""):
            markup = InlineKeyboardMarkup(
                [
                    [
                        InlineKeyboardButton("Approve", callback_data=f"approve:{approval_id}"),
                        InlineKeyboardButton("Deny", callback_data=f"deny:{approval_id}"),
                    ]
                ]
            )
        else:
            text += "\n(No approver is configured for this agent here: decide it elsewhere.)"
        sent = await bot.send_message(chat_id, text, reply_markup=markup)
        self._posted[approval_id] = _Posted(chat_id, sent.message_id, approval_text(data))

    async def _settle(self, bot: Bot, asked: list[str]) -> None:
        """Once the run ended: shows on each request still open here how it ended (expired,
        or decided elsewhere)."""
        for approval_id in asked:
            posted = self._posted.pop(approval_id, None)
            if posted is None:
                continue
            try:
                approval = self._approvals.get(approval_id)
            except NotFound:
                continue
            state = approval.state
            if state is ApprovalState.PENDING:
                state = ApprovalState.EXPIRED  # its call is over: it can no longer run
            await bot.edit_message_text(
                decision_text(posted.text, state.value, approval.decided_by),
                chat_id=posted.chat_id,
                message_id=posted.message_id,
            )

    def _agent_of(self, approval_id: str) -> str | None:
        with contextlib.suppress(NotFound):
            agent = self._approvals.get(approval_id).subject.get("agent")
            return str(agent) if agent else None
        return None

    # -- buttons --------------------------------------------------------------------------

    async def _press(self, bot: Bot, query: CallbackQuery) -> None:
        verdict, _, approval_id = (query.data or "").partition(":")
        user = query.from_user.id
        if verdict not in ("approve", "deny"):
            await query.answer("This button is not one of mine.")
            return
        try:
            approval = self._approvals.get(approval_id)
        except NotFound:
            await query.answer("That approval no longer exists.")
            return
        agent = str(approval.subject.get("agent") or "")
        # SECURITY: only the approvers listed for this approval's agent (by Telegram user
        # id) decide; anyone else's press is refused and changes nothing.
        if user not in self._settings.approvers.get(agent, []):
            self._refuse(user, query.message.chat.id if query.message else 0, "approval")
            await query.answer(
                f"You are not an approver for agent {agent}; nothing was decided.",
                show_alert=True,
            )
            return
        by = f"telegram:{user}"
        state = approval.state
        if state is ApprovalState.PENDING and datetime.now(UTC) >= datetime.fromisoformat(
            approval.expires_at
        ):
            state = ApprovalState.EXPIRED  # the waiting call expires it at its next look
        if state is ApprovalState.PENDING:
            try:
                self._runner.decide(self._principal(by), approval_id, approve=verdict == "approve")
                state = ApprovalState.APPROVED if verdict == "approve" else ApprovalState.DENIED
                await query.answer("Approved." if verdict == "approve" else "Denied.")
            except Conflict:
                approval = self._approvals.get(approval_id)
                state, by = approval.state, approval.decided_by or ""
                await query.answer(f"Already {state.value}.")
            except NotFound:
                await query.answer("That approval is not this bot's team's.")
                return
        else:
            by = approval.decided_by or ""
            await query.answer(f"Already {state.value}.")
        posted = self._posted.pop(approval_id, None)
        if posted is not None:
            request = posted.text
        elif isinstance(query.message, Message):
            request = query.message.text or ""
        else:
            request = f"Approval {approval_id}"
        if query.message is not None:
            await bot.edit_message_text(
                decision_text(request, state.value, None if state.value == "expired" else by),
                chat_id=query.message.chat.id,
                message_id=query.message.message_id,
            )
