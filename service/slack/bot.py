"""The Slack chatbot: paste a crash log in Slack, get the triage in the thread.

Ways in: an ``@sglang-triage`` mention, a DM, or the ``/sglang-triage`` slash
command. The log is the message text (``` code blocks included) or an
uploaded text file/snippet, fetched from its ``url_private_download`` with the
bot token (only from Slack's file host or the configured API host). Bolt
acknowledges within 3 s (``process_before_response=False``); the triage runs
on the listener thread pool and the answer is posted in the thread as Block
Kit (see :mod:`service.slack.blocks`), with a link to ``{public_url}/t/{id}`` (the web page of the stored triage)
(stored with :meth:`Records.save`).

Follow-ups in the thread ("why?", "show the check", "other fixes", "what
about on H100?", "on 0.5.23?") are answered from the per-thread context (the
payload and options); a GPU or release word re-runs the engine with the new
fact. The "This fixed it" button records the incident with
``Records.confirm(..., source="slack")``.

Safety: event retries are dropped by ``event_id`` (and by message ts), posts
are rate-limited per channel by a token bucket (see :mod:`service.slack.state`), and
every outgoing payload is redacted of secrets (see :mod:`service.slack.blocks`).
Message text is read by :mod:`service.slack.text`, files by :mod:`service.slack.files`;
replies go out through :mod:`service.slack.replies`. The triage is the shared use case
(:meth:`service.usecase.TriageUseCase.answer_and_store`), stored like the API's, with
``similar`` and the background replay, so the report link shows the replay verdicts when
they are in. Two modes (:mod:`service.slack.serve`): HTTP
(:func:`~service.slack.serve.mount_slack` adds ``POST /slack/events`` to the FastAPI app,
signatures verified by Bolt) and Socket Mode (:func:`~service.slack.serve.run_socket_mode`).
The state (event ids seen, thread contexts, rate limits) lives in the records
database when ``TRIAGE_DATABASE_URL`` is set, shared by every worker and host
(:mod:`service.slack.shared`); otherwise in the process's memory, and HTTP mode
should then run a single worker process.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
from slack_bolt import App, BoltRequest, BoltResponse
from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError

from kb.errors import ConfigError, TriageError
from kb.records import ConfirmRefused, Records, owner_check
from service.engine import Engine, TriageResult, redact
from service.settings import Settings, reveal
from service.slack import blocks as sb
from service.slack.files import fetch_files
from service.slack.replies import Blocks, Replies, make_client
from service.slack.shared import SlackState, slack_state
from service.slack.state import ThreadContext, TokenBucket
from service.slack.text import (
    classify_followup,
    drop_versions,
    looks_like_log,
    normalize_text,
    split_options,
)
from service.usecase import Keep, TriageRequest, TriageUseCase

log = logging.getLogger("sglang_triage.slack")

EngineFactory = Callable[[], Engine]

SLASH_COMMAND = "/sglang-triage"


# ------------------------------------------------------------------------------ the bot


class SlackTriageBot:
    """The Bolt app and its listeners, around an :class:`Engine` and :class:`Records`."""

    def __init__(
        self,
        settings: Settings,
        engine_factory: EngineFactory,
        records: Records,
        *,
        socket_mode: bool = False,
        client: WebClient | None = None,
        bucket: TokenBucket | None = None,
        workers: int = 8,
        state: SlackState | None = None,
    ) -> None:
        if not settings.slack_bot_token:
            raise ConfigError("the Slack bot needs TRIAGE_SLACK_BOT_TOKEN")
        if not socket_mode and not settings.slack_signing_secret:
            raise ConfigError("HTTP mode needs TRIAGE_SLACK_SIGNING_SECRET")
        self.settings = settings
        self.records = records
        self._engine_factory = engine_factory
        self._engine: Engine | None = None
        self._engine_lock = threading.Lock()
        # shared through the database when one is configured (see service.slack.shared)
        self.state = state or slack_state(records.engine if settings.database_url else None)
        self.threads = self.state.threads
        self.events = self.state.events
        self.messages = self.state.messages
        self.bucket = bucket or self.state.bucket
        self.secrets = tuple(
            s
            for s in map(
                reveal,
                (
                    settings.slack_bot_token,
                    settings.slack_signing_secret,
                    settings.slack_app_token,
                    settings.llm_api_key,
                    *settings.api_keys,
                    *settings.team_api_keys,
                ),
            )
            if s
        )
        self.client = client or make_client(settings)
        self.replies = Replies(self.client, self.bucket, self.secrets, settings)
        self.executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="slack-triage")
        self.app = App(
            client=self.client,
            signing_secret=reveal(settings.slack_signing_secret) or "",
            token_verification_enabled=False,
            process_before_response=False,
            request_verification_enabled=not socket_mode,
            listener_executor=self.executor,
            name="sglang-triage",
        )
        self.app.use(self._dedupe)
        self.app.event("app_mention")(self._on_mention)
        self.app.event("message")(self._on_message)
        self.app.command(SLASH_COMMAND)(self._on_command)
        self.app.action(sb.FIXED_ACTION)(self._on_fixed)
        self.app.action(sb.REPORT_ACTION)(lambda ack: ack())

    # -- engine -----------------------------------------------------------------------
    @property
    def engine(self) -> Engine:
        with self._engine_lock:
            if self._engine is None:
                self._engine = self._engine_factory()
            return self._engine

    def report_url(self, result: TriageResult) -> str | None:
        """The web page of stored triage ``result`` (None: it was not stored)."""
        if result.id is None:
            return None
        return f"{self.settings.public_url.rstrip('/')}/t/{result.id}"

    # -- middleware -------------------------------------------------------------------
    def _dedupe(
        self, req: BoltRequest, body: dict[str, Any], next: Callable[[], BoltResponse]
    ) -> BoltResponse | None:
        event_id = body.get("event_id") if isinstance(body, dict) else None
        retry = (req.headers.get("x-slack-retry-num") or [None])[0]
        if event_id and not self.events.add(str(event_id)):
            log.info("dropping duplicate delivery of %s (retry %s)", event_id, retry)
            return BoltResponse(status=200, body="", headers={"x-slack-no-retry": "1"})
        return next()

    # -- listeners --------------------------------------------------------------------
    def _on_mention(self, event: dict[str, Any]) -> None:
        self._handle_message(event)

    def _on_message(self, event: dict[str, Any]) -> None:
        if event.get("channel_type") != "im" or event.get("bot_id"):
            return
        if event.get("subtype") not in (None, "file_share", "thread_broadcast"):
            return
        self._handle_message(event)

    def _on_command(self, ack: Callable[..., None], command: dict[str, Any]) -> None:
        options, text = split_options(normalize_text(command.get("text", "")))
        if not text or text.lower() in ("help", "?"):
            fallback, blocks = sb.help_blocks(False)
            ack(text=fallback, blocks=blocks)
            return
        ack(text="Triaging your crash log… the answer will be posted in this channel.")
        channel = command.get("channel_id", "")
        done = self._triage_or_report(
            channel,
            None,
            text,
            options,
            {"command": SLASH_COMMAND, "user": command.get("user_id")},
            command.get("response_url"),
        )
        if done is None:
            return
        result, tid, payload, opts = done
        fallback, blocks = sb.triage_blocks(result, self.report_url(result))
        fallback = f"<@{command.get('user_id', '')}> asked: {fallback}"
        ts = self._post(channel, None, fallback, blocks)
        if ts is None:  # not in the channel: fall back to the response_url
            self._respond(command.get("response_url"), fallback, blocks)
            return
        self.threads.put(ThreadContext(channel, ts, payload, opts, tid, result))

    def _on_fixed(self, ack: Callable[..., None], body: dict[str, Any]) -> None:
        ack()
        action = (body.get("actions") or [{}])[0]
        user = (body.get("user") or {}).get("id", "")
        channel = (body.get("channel") or {}).get("id") or (body.get("container") or {}).get(
            "channel_id", ""
        )
        message = body.get("message") or {}
        thread = message.get("thread_ts") or message.get("ts")
        try:
            value = json.loads(action.get("value") or "{}")
            tid, rank = str(value["t"]), int(value.get("r", 1))
        except (ValueError, KeyError, TypeError):
            log.warning("malformed fixed-it button value")
            return
        rec = self.records.get(tid)
        fixes = (rec or {}).get("result", {}).get("fixes", [])
        fix = next((f for f in fixes if f.get("rank") == rank), fixes[0] if fixes else None)
        if rec is None or fix is None:
            self._post(channel, thread, *sb.error_blocks(f"triage {tid} is no longer stored"))
            return
        try:  # any user of the thread may confirm first; only they may change it later
            self.records.confirm(
                tid,
                fix,
                note=f"confirmed in Slack by {user} in {channel}",
                source="slack",
                owner=f"slack:{user}",
                check=owner_check(f"slack:{user}", any_first=True),
            )
        except ConfirmRefused:
            self._post(
                channel,
                thread,
                *sb.error_blocks(
                    f"Triage {tid} was already confirmed by someone else; only they can change it."
                ),
            )
            return
        if message.get("ts") and message.get("blocks"):
            self._update(
                channel,
                message["ts"],
                message.get("text", ""),
                sb.confirmed_blocks(message["blocks"], user, fix.get("command", "")),
            )
        self._post(
            channel,
            thread,
            f"Recorded: fix {rank} resolved triage {tid}.",
            [
                sb.section(
                    f":white_check_mark: Thanks <@{user}>: recorded as an incident "
                    f"(triage `{tid}`, fix {rank})."
                )
            ],
        )

    # -- messages ---------------------------------------------------------------------
    def _handle_message(self, event: dict[str, Any]) -> None:
        channel, ts = event.get("channel", ""), event.get("ts", "")
        if not self.messages.add(f"{channel}:{ts}"):
            return  # the same message arrived as app_mention and message.im
        thread = event.get("thread_ts") or ts
        options, text = split_options(normalize_text(event.get("text", "")))
        files = event.get("files") or []
        ctx = self.threads.get(channel, event.get("thread_ts"))
        if ctx is not None and not files and not looks_like_log(text):
            self._followup(ctx, text, options)
            return
        if files:
            try:
                fetched = fetch_files(self.client, self.settings, files)
                text = "\n".join(t for t in [text, *fetched] if t)
            except TriageError as exc:
                self._post(channel, thread, *sb.error_blocks(exc.message, sb.INPUT_HINT))
                return
            except (httpx.HTTPError, SlackApiError) as exc:
                log.warning("file fetch failed: %s", type(exc).__name__)
                self._post(
                    channel, thread, *sb.error_blocks("Could not fetch the file from Slack.")
                )
                return
        if not text or (not files and not looks_like_log(text) and len(text) < 80):
            self._post(channel, thread, *sb.help_blocks(ctx is not None))
            return
        done = self._triage_or_report(
            channel,
            thread,
            text,
            options,
            {"channel": channel, "thread_ts": thread, "user": event.get("user")},
        )
        if done is None:
            return
        result, tid, payload, opts = done
        self.threads.put(ThreadContext(channel, thread, payload, opts, tid, result))
        self._post(channel, thread, *sb.triage_blocks(result, self.report_url(result)))

    def _followup(self, ctx: ThreadContext, text: str, options: dict[str, str]) -> None:
        kind, value = classify_followup(text)
        if kind == "release" and value == ctx.result.release.release:
            kind, value = classify_followup(drop_versions(text))  # names the current release
        if options:
            kind = "rerun"
        if kind in ("hardware", "release", "rerun"):
            new = dict(ctx.options)
            new.update(
                {"hardware": value}
                if kind == "hardware"
                else {"release": value}
                if kind == "release"
                else options
            )
            owner = (self.records.owners(ctx.tid) or (None,))[0]  # the thread's asker
            done = self._triage_or_report(
                ctx.channel,
                ctx.thread_ts,
                ctx.payload,
                new,
                {
                    "channel": ctx.channel,
                    "thread_ts": ctx.thread_ts,
                    "follow_up": text[:200],
                    "owner": owner,
                },
                redacted=True,
            )
            if done is None:
                return
            result, tid, payload, opts = done
            note = sb.change_note(ctx.result, ctx.options, result, opts)
            self.threads.put(ThreadContext(ctx.channel, ctx.thread_ts, payload, opts, tid, result))
            self._post(
                ctx.channel, ctx.thread_ts, *sb.triage_blocks(result, self.report_url(result), note)
            )
            return
        render = {
            "why": sb.why_blocks,
            "check": sb.check_blocks,
            "fixes": sb.fixes_blocks,
            "unknowns": sb.unknowns_blocks,
        }.get(kind)
        fallback, blocks = render(ctx.result) if render else sb.help_blocks(True)
        self.threads.put(ctx)
        self._post(ctx.channel, ctx.thread_ts, fallback, blocks)

    def _triage_or_report(
        self,
        channel: str,
        thread: str | None,
        text: str,
        options: dict[str, Any],
        source: dict[str, Any],
        response_url: str | None = None,
        redacted: bool = False,
    ) -> tuple[TriageResult, str, str, dict[str, str | None]] | None:
        """:meth:`_triage`, or None after posting why it failed (never a stack trace)."""
        try:
            return self._triage(text, options, source, redacted=redacted)
        except TriageError as exc:
            fallback, blocks = sb.error_blocks(exc.message, sb.INPUT_HINT)
        except Exception:  # a bug must not leave the thread silent
            log.exception("slack triage failed")
            fallback, blocks = sb.error_blocks(
                "The triage failed unexpectedly; the error was logged."
            )
        if response_url:
            self._respond(response_url, fallback, blocks)
        else:
            self._post(channel, thread, fallback, blocks)
        return None

    def _triage(
        self, text: str, options: dict[str, Any], source: dict[str, Any], redacted: bool = False
    ) -> tuple[TriageResult, str, str, dict[str, str | None]]:
        """Triage the (redacted) log and store it (the shared use case); ``(result, id,
        payload, options)``. The asker owns the record, and their share of the on-demand
        budget and of the replay queue is spent; an on-demand ingest is waited for (a posted
        answer cannot change)."""
        payload = text if redacted else redact(text, self.secrets)
        user = source.get("user")
        client = f"slack:{user or 'unknown'}"
        ask = TriageRequest(
            payload,
            release=options.get("release"),
            hardware=options.get("hardware"),
            model=options.get("model"),
            model_arch=options.get("model_arch"),
            client=client,
        )
        keep = Keep(
            owner=f"slack:{user}" if user else source.get("owner"),
            record={"source": "slack", "slack": source},
            replay_client=client,
            late_updates=False,  # waits for an ingest
        )
        usecase = TriageUseCase(self.engine, self.settings, self.records)
        stored = usecase.answer_and_store(ask, keep)
        return stored.result, stored.tid, payload, ask.options()

    # -- Web API ----------------------------------------------------------------------
    def _post(self, channel: str, thread_ts: str | None, text: str, blocks: Blocks) -> str | None:
        return self.replies.post(channel, thread_ts, text, blocks)

    def _update(self, channel: str, ts: str, text: str, blocks: Blocks) -> None:
        self.replies.update(channel, ts, text, blocks)

    def _respond(self, response_url: str | None, text: str, blocks: Blocks) -> None:
        self.replies.respond(response_url, text, blocks)

    def close(self) -> None:
        self.executor.shutdown(wait=False, cancel_futures=True)


__all__ = ["EngineFactory", "SlackTriageBot"]
