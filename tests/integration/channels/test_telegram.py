"""The Telegram channel end to end: a real server and real sandboxes, with the scripted Bot
API server as Telegram and the scripted model server as the model."""

from __future__ import annotations

from typing import Any

import httpx

from tests.framework.bot_api import Call, ScriptedBotApi
from tests.framework.model_server import code, text
from tests.integration.channels.conftest import (
    APPROVER,
    BYSTANDER,
    CAREFUL_CHAT,
    HELPER_USER,
    LONG_USER,
    STRANGER,
    TOKEN,
    TelegramEnv,
)


def _reply(bot: ScriptedBotApi, chat: int, needle: str) -> str:
    return str(
        bot.wait_for(
            lambda b: next((t for t in b.texts(chat) if needle in t), None),
            what=f"a message containing {needle!r} in chat {chat}",
        )
    )


def _approval(env: TelegramEnv, approval_id: str) -> dict[str, Any]:
    response = httpx.get(
        f"{env.server.url}/v1/approvals/{approval_id}",
        headers={"X-API-Key": env.server.api_key},
    )
    assert response.status_code == 200, response.text
    return dict(response.json())


def test_a_message_starts_a_run_in_the_chats_session_and_the_answer_is_the_reply(
    telegram_env: TelegramEnv,
) -> None:
    env, bot = telegram_env, telegram_env.bot
    env.models.reset()
    env.models.script(
        "tg-helper-model",
        code("print('raw output ' * 50)"),
        text("The answer is **42**."),
        text("Still 42."),
        text("Fresh start."),
    )
    bot.message(HELPER_USER, "What is the answer?")
    reply = _reply(bot, HELPER_USER, "The answer is **42**.")
    # The code and its output are summarised, not dumped.
    assert "ran python: exit 0, 1 line of output" in reply
    assert "raw output" not in reply
    assert bot.of("sendChatAction", HELPER_USER)[0].params["action"] == "typing"
    assert env.user_texts("tg-helper-model")[0] == "What is the answer?"

    # The chat is one session: the next run sees the conversation so far.
    bot.message(HELPER_USER, "And again?")
    _reply(bot, HELPER_USER, "Still 42.")
    history = env.models.for_model("tg-helper-model")[-1].body["messages"]
    assert "What is the answer?" in str(history) and "The answer is **42**." in str(history)

    # /new starts over: the next run sees none of it.
    bot.message(HELPER_USER, "/new")
    _reply(bot, HELPER_USER, "Started a new conversation.")
    bot.message(HELPER_USER, "Hello?")
    _reply(bot, HELPER_USER, "Fresh start.")
    history = env.models.for_model("tg-helper-model")[-1].body["messages"]
    assert "What is the answer?" not in str(history)
    assert "Hello?" in str(history)


def test_a_user_not_allowed_is_refused_and_starts_nothing(telegram_env: TelegramEnv) -> None:
    env, bot = telegram_env, telegram_env.bot
    env.models.reset()
    bot.message(STRANGER, "Delete everything")
    refusal = _reply(bot, STRANGER, "Sorry")
    assert str(STRANGER) in refusal  # says which id the operator would have to allow
    assert env.models.requests == []
    assert not bot.of("sendChatAction", STRANGER)
    assert f"user={STRANGER}" in env.server.log_text()  # telegram.refused was logged
    # The bot token never reaches the server's log (httpx logs each URL, which carries it).
    assert TOKEN not in env.server.log_text()


def test_a_long_answer_is_split_on_line_boundaries(telegram_env: TelegramEnv) -> None:
    env, bot = telegram_env, telegram_env.bot
    env.models.reset()
    lines = [f"row {n:04d}: " + "y" * 60 for n in range(150)]  # about 11 000 characters
    env.models.script("tg-helper-model", text("\n".join(lines)))
    bot.message(LONG_USER, "Give me a long table.")
    bot.wait_for(
        lambda b: any(lines[-1] in t for t in b.texts(LONG_USER)),
        what="the last part of the long answer",
    )
    parts = bot.texts(LONG_USER)
    assert len(parts) == 3
    assert all(len(p) <= 4096 for p in parts)
    assert [line for p in parts for line in p.split("\n")] == lines


def test_an_approval_is_asked_with_buttons_and_only_an_approver_decides_it(
    telegram_env: TelegramEnv,
) -> None:
    env, bot = telegram_env, telegram_env.bot
    env.models.reset()
    env.models.script(
        "tg-careful-model",
        code("import sandgate_tools as tools\nprint('got', tools.kv.get(key='user:5'))"),
        text("User 5 was read after your approval."),
    )
    bot.message(APPROVER, "Read user 5")
    asked: Call = bot.wait_for(
        lambda b: next(
            (c for c in b.of("sendMessage", CAREFUL_CHAT) if "reply_markup" in c.params), None
        ),
        what="the approval request with buttons",
    )
    assert "Approval needed: kv get" in asked.params["text"]
    assert "user:5" in asked.params["text"]
    buttons = asked.params["reply_markup"]["inline_keyboard"][0]
    assert [b["text"] for b in buttons] == ["Approve", "Deny"]
    approve = buttons[0]["callback_data"]
    approval_id = approve.split(":", 1)[1]
    assert _approval(env, approval_id)["state"] == "pending"

    # Someone allowed to talk, but no approver of this agent: refused, nothing decided.
    bot.press(BYSTANDER, asked, approve)
    refused = bot.wait_for(
        lambda b: next(
            (
                c
                for c in b.of("answerCallbackQuery")
                if "not an approver" in str(c.params.get("text"))
            ),
            None,
        ),
        what="the refusal of the bystander's press",
    )
    assert refused.params.get("show_alert") in (True, "true")
    assert _approval(env, approval_id)["state"] == "pending"
    assert not bot.of("editMessageText", CAREFUL_CHAT)

    # The approver: the gateway gets the decision, the run goes on and answers.
    bot.press(APPROVER, asked, approve)
    edited = bot.wait_for(
        lambda b: next(iter(b.of("editMessageText", CAREFUL_CHAT)), None),
        what="the request edited to show the decision",
    )
    assert edited.params["message_id"] == asked.message_id
    assert f"Approved by telegram:{APPROVER}" in edited.params["text"]
    decided = _approval(env, approval_id)
    assert decided["state"] == "approved" and decided["decided_by"] == f"telegram:{APPROVER}"
    reply = _reply(bot, CAREFUL_CHAT, "User 5 was read after your approval.")
    assert "kv get: allowed" in reply and "ran python: exit 0" in reply
    # The code got past the call: the model's second request carries the code's output.
    assert "got" in str(env.models.for_model("tg-careful-model")[-1].body["messages"])


def test_a_restart_resumes_after_the_last_update_and_loses_none(
    telegram_env: TelegramEnv,
) -> None:
    env, bot = telegram_env, telegram_env.bot
    env.models.reset()
    env.models.script("tg-helper-model", text("before"), text("after"))
    first = bot.message(HELPER_USER, "Message before the crash")
    _reply(bot, HELPER_USER, "before")
    env.server.kill()  # SIGKILL, as a crash
    polls = len(bot.of("getUpdates"))
    bot.message(HELPER_USER, "Message while down")
    env.server.start()
    _reply(bot, HELPER_USER, "after")
    # Every poll since the crash resumed after the recorded update (a poll without an
    # offset, or an earlier one, would be handed the unconfirmed updates again).
    resumed = bot.of("getUpdates")[polls:]
    assert resumed and all(c.params.get("offset", 0) >= first + 1 for c in resumed)
    # Each message was answered once: nothing repeated, nothing lost.
    assert env.user_texts("tg-helper-model") == ["Message before the crash", "Message while down"]
    assert sum(t.startswith("before") for t in bot.texts(HELPER_USER)) == 1


def test_a_refused_token_is_logged_and_retried_without_stopping_the_server(
    sandgate_server_factory: Any,
) -> None:
    bot = ScriptedBotApi("700000001:the-right-token").start()
    try:
        server = sandgate_server_factory(
            config=(
                "agents: [{id: helper, model: m}]\n"
                "channels:\n  telegram:\n"
                f"    api_url: {bot.url}\n    agent: helper\n    allowed_users: [1]\n"
            ),
            extra_env={"TELEGRAM_BOT_TOKEN": "700000001:a-revoked-token"},
        )
        # Refused, then asked again after a backoff: the getMe calls are the proof.
        bot.wait_for(lambda b: len(b.calls) >= 2, what="a second getMe after the refusal")
        assert all(c.method == "getMe" and c.status == 401 for c in bot.calls)
        assert httpx.get(f"{server.url}/health").status_code == 200
        log = server.log_text()
        assert "telegram.token_refused" in log and "BotFather" in log
        assert "a-revoked-token" not in log
        server.stop()
    finally:
        bot.stop()


def test_cancel_stops_the_running_run(telegram_env: TelegramEnv) -> None:
    env, bot = telegram_env, telegram_env.bot
    env.models.reset()
    env.models.script(
        "tg-helper-model", code("import time\ntime.sleep(300)\nprint('never')"), text("late")
    )
    bot.message(LONG_USER, "Take your time.")
    bot.wait_for(
        lambda b: env.models.for_model("tg-helper-model") and b.of("sendChatAction", LONG_USER),
        what="the run working",
    )
    bot.message(LONG_USER, "/cancel")
    try:
        reply = _reply(bot, LONG_USER, "Cancelled.")
    except AssertionError as exc:
        raise AssertionError(
            f"{exc}\n--- server log ---\n{env.server.log_text()[-6000:]}"
        ) from None
    assert "late" not in reply and "never" not in reply
    assert len(env.models.for_model("tg-helper-model")) == 1  # the model was not asked again
    bot.message(LONG_USER, "/cancel")
    _reply(bot, LONG_USER, "Nothing is running.")


def test_an_approval_nobody_can_decide_here_shows_that_it_expired(
    telegram_env: TelegramEnv,
) -> None:
    env, bot = telegram_env, telegram_env.bot
    env.models.reset()
    env.models.script(
        "tg-helper-model",
        code(
            "import sandgate_tools as tools\n"
            "try:\n    tools.kv.set(key='note', value='x')\n"
            "except tools.ToolError as exc:\n    print('refused:', exc.code)"
        ),
        text("The note was not written."),
    )
    bot.message(LONG_USER, "Write a note.")
    asked = bot.wait_for(
        lambda b: next(
            (
                c
                for c in b.of("sendMessage", LONG_USER)
                if "Approval needed" in str(c.params.get("text"))
            ),
            None,
        ),
        what="the approval request",
    )
    # The helper agent has no approvers: no buttons, and the chat says so.
    assert "reply_markup" not in asked.params
    assert "No approver is configured" in asked.params["text"]
    _reply(bot, LONG_USER, "The note was not written.")
    edited = bot.wait_for(
        lambda b: next(
            (
                c
                for c in b.of("editMessageText", LONG_USER)
                if c.params["message_id"] == asked.message_id
            ),
            None,
        ),
        what="the request edited to show it expired",
    )
    assert "Expired" in edited.params["text"]
    assert "approval_" in str(env.models.for_model("tg-helper-model")[-1].body["messages"])
