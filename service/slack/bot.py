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
Message text is read by :mod:`service.slack.text`. Two modes: HTTP
(:func:`mount_slack` adds ``POST /slack/events`` to the FastAPI app,
signatures verified by Bolt) and Socket Mode (:func:`run_socket_mode`).
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
from urllib.parse import urlsplit

import httpx
from fastapi import FastAPI, Request
from fastapi.responses import Response
from slack_bolt import App, BoltRequest, BoltResponse
from slack_bolt.adapter.fastapi import SlackRequestHandler
from slack_bolt.adapter.starlette.handler import to_bolt_request, to_starlette_response
from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError
from slack_sdk.http_retry.builtin_handlers import RateLimitErrorRetryHandler

from kb.errors import ConfigError, TriageError
from kb.records import ConfirmRefused, Records, new_triage_id, owner_check
from service import ondemand
from service.engine import Engine, TriageResult, redact, redact_payload
from service.settings import Settings, reveal
from service.slack import blocks as sb
from service.slack.shared import SlackState, slack_state
from service.slack.state import ThreadContext, TokenBucket
from service.slack.text import (
    classify_followup,
    drop_versions,
    looks_like_log,
    normalize_text,
    split_options,
)

log = logging.getLogger("sglang_triage.slack")

EngineFactory = Callable[[], Engine]
Blocks = list[dict[str, Any]]

SLASH_COMMAND = "/sglang-triage"
FILE_HOSTS = ("files.slack.com",)
TEXT_FILETYPES = {
    "text",
    "python",
    "shell",
    "log",
    "json",
    "yaml",
    "markdown",
    "post",
    "diff",
    "javascript",
    "plain",
    "txt",
    "csv",
    "toml",
    "ini",
}


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

    def report_url(self, tid: str) -> str:
        return f"{self.settings.public_url.rstrip('/')}/t/{tid}"

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
        fallback, blocks = sb.triage_blocks(result, self.report_url(tid))
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
                text = "\n".join(t for t in [text, *self._fetch_files(files)] if t)
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
        self._post(channel, thread, *sb.triage_blocks(result, self.report_url(tid)))

    def _followup(self, ctx: ThreadContext, text: str, options: dict[str, str]) -> None:
        kind, value = classify_followup(text)
        if kind == "release" and value == (ctx.result.release or {}).get("release"):
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
                ctx.channel, ctx.thread_ts, *sb.triage_blocks(result, self.report_url(tid), note)
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
        """Run the engine on the (redacted) log; store the result; ``(result, id, payload, options)``."""
        payload = text if redacted else redact(text, self.secrets)
        opts: dict[str, str | None] = {
            k: options.get(k) for k in ("release", "hardware", "model", "model_arch")
        }
        result = ondemand.triage(
            self.engine,
            self.settings,
            payload,
            **opts,  # waits for an ingest
            client=f"slack:{source.get('user') or 'unknown'}",
        )
        tid = new_triage_id()
        result.id = tid
        user = source.get("user")
        self.records.save(
            tid,
            {"options": opts, "log": payload[:200_000], "source": "slack", "slack": source},
            result.model_dump(mode="json"),
            owner=f"slack:{user}" if user else source.get("owner"),
        )
        return result, tid, payload, opts

    def _fetch_files(self, files: list[dict[str, Any]]) -> list[str]:
        """The text of the uploaded files/snippets, fetched with the bot token."""
        out: list[str] = []
        limit = self.settings.max_body_bytes
        for f in files[:3]:
            if not f.get("url_private_download") and f.get("id"):
                f = {**f, **(self.client.files_info(file=f["id"]).get("file") or {})}
            url = f.get("url_private_download") or f.get("url_private")
            mimetype, filetype = str(f.get("mimetype") or ""), str(f.get("filetype") or "")
            if not url or not (
                mimetype.startswith("text/")
                or filetype in TEXT_FILETYPES
                or f.get("mode") == "snippet"
            ):
                raise _input_error(f"{f.get('name', 'the file')} is not a text file")
            if int(f.get("size") or 0) > limit:
                raise _input_error(f"{f.get('name', 'the file')} is over {limit} bytes")
            if not self._allowed_file_url(url):
                raise _input_error("refusing to fetch a file from outside Slack")
            resp = httpx.get(
                url,
                headers={"Authorization": f"Bearer {reveal(self.settings.slack_bot_token)}"},
                timeout=20.0,
                follow_redirects=False,
            )
            if resp.status_code != 200 or "text/html" in resp.headers.get("content-type", ""):
                raise _input_error(
                    f"could not download {f.get('name', 'the file')} "
                    f"(HTTP {resp.status_code}); is files:read granted?"
                )
            data = resp.content[: limit + 1]
            if len(data) > limit or b"\x00" in data:
                raise _input_error(f"{f.get('name', 'the file')} is too large or binary")
            out.append(data.decode("utf-8", errors="replace"))
        return out

    def _allowed_file_url(self, url: str) -> bool:
        parts = urlsplit(url)
        hosts = set(FILE_HOSTS)
        if self.settings.slack_api_url:
            hosts.add(urlsplit(self.settings.slack_api_url).netloc)
        return parts.netloc in hosts and (parts.scheme == "https" or parts.netloc not in FILE_HOSTS)

    # -- Web API ----------------------------------------------------------------------
    def _post(self, channel: str, thread_ts: str | None, text: str, blocks: Blocks) -> str | None:
        if not self.bucket.acquire(channel):
            log.warning("rate limit: dropping a reply to %s", channel)
            return None
        payload = redact_payload({"text": text[:3000], "blocks": blocks}, self.secrets)
        try:
            resp = self.client.chat_postMessage(
                channel=channel, thread_ts=thread_ts, unfurl_links=False, **payload
            )
        except SlackApiError as exc:
            log.warning("chat.postMessage to %s failed: %s", channel, exc.response.get("error"))
            return None
        return resp.get("ts")

    def _update(self, channel: str, ts: str, text: str, blocks: Blocks) -> None:
        if not self.bucket.acquire(channel):
            return
        payload = redact_payload({"text": text[:3000], "blocks": blocks}, self.secrets)
        try:
            self.client.chat_update(channel=channel, ts=ts, **payload)
        except SlackApiError as exc:
            log.warning("chat.update failed: %s", exc.response.get("error"))

    def _respond(self, response_url: str | None, text: str, blocks: Blocks) -> None:
        if not response_url:
            return
        if not allowed_response_url(response_url, self.settings.slack_response_hosts):
            log.warning("refusing to post to a response_url outside TRIAGE_SLACK_RESPONSE_HOSTS")
            return
        payload = redact_payload(
            {"text": text[:3000], "blocks": blocks, "response_type": "in_channel"}, self.secrets
        )
        try:
            httpx.post(response_url, json=payload, timeout=10.0)
        except httpx.HTTPError as exc:
            log.warning("response_url post failed: %s", exc)

    def close(self) -> None:
        self.executor.shutdown(wait=False, cancel_futures=True)


_LOOPBACK = ("127.0.0.1", "localhost", "::1")


def allowed_response_url(url: str, hosts: list[str]) -> bool:
    """May the bot post to ``url`` (a slash command's ``response_url``)? Only to a host in
    ``hosts`` (``TRIAGE_SLACK_RESPONSE_HOSTS``: Slack's), over https; a loopback host listed
    there (a test's stub) may use http. Never to a URL with credentials or another port
    trick: the host is compared after parsing."""
    try:
        parts = urlsplit(url)
        host = (parts.hostname or "").lower()
        parts.port  # noqa: B018 - raises on a malformed port
    except ValueError:
        return False
    if parts.username or parts.password or host not in {h.lower() for h in hosts}:
        return False
    return parts.scheme == "https" or (parts.scheme == "http" and host in _LOOPBACK)


def _input_error(message: str) -> TriageError:
    from service.errors import LogParseError

    return LogParseError(message)


# ------------------------------------------------------------------------------ wiring


def make_client(settings: Settings) -> WebClient:
    """A WebClient with the bot token, ``settings.slack_api_url`` and 429 retries."""
    kwargs: dict[str, Any] = {"token": reveal(settings.slack_bot_token), "timeout": 20}
    if settings.slack_api_url:
        kwargs["base_url"] = settings.slack_api_url.rstrip("/") + "/"
    client = WebClient(**kwargs)
    client.retry_handlers.append(RateLimitErrorRetryHandler(max_retry_count=2))
    return client


def _defaults(
    settings: Settings, engine_factory: EngineFactory | None, records: Records | None
) -> tuple[EngineFactory, Records]:
    from service.wiring import engine_for, records_for

    factory = engine_factory or (lambda: engine_for(settings))
    return factory, records or records_for(settings)


class _ThreadedHandler(SlackRequestHandler):
    """Bolt's FastAPI handler, dispatching on a worker thread so the event loop never waits."""

    async def handle(
        self, req: Any, addition_context_properties: dict[str, Any] | None = None
    ) -> Any:
        from starlette.concurrency import run_in_threadpool

        if req.method != "POST":
            return await super().handle(req, addition_context_properties)
        body = await req.body()
        try:  # Bolt parses the body before it checks the signature
            bolt_req = to_bolt_request(req, body, addition_context_properties)
        except ValueError:  # a body starting with "{" that is not JSON, bad form encoding
            return Response(
                "the request body is neither JSON nor form data",
                status_code=400,
                media_type="text/plain",
            )
        bolt_resp = await run_in_threadpool(self.app.dispatch, bolt_req)
        return to_starlette_response(bolt_resp)


def mount_slack(
    app: FastAPI,
    settings: Settings,
    engine_factory: EngineFactory | None = None,
    records: Records | None = None,
    *,
    path: str = "/slack/events",
) -> SlackTriageBot:
    """Add ``POST {path}`` (events, slash command, interactivity) to a FastAPI app.

    Slack signs every request; Bolt answers 401 to a bad signature or a
    timestamp over five minutes old, and this route answers 401 to a timestamp
    that is not a number and to a form post (slash command, button) whose
    signature it has already seen (a replay; Slack never resends those). The
    body limit is the API's (:mod:`service.api.guard`). The engine defaults to
    the API's KB and the records to the API's ``records.sqlite``, so report
    links resolve.
    """
    factory, recs = _defaults(settings, engine_factory, records)
    bot = SlackTriageBot(settings, factory, recs)
    handler = _ThreadedHandler(bot.app)
    signatures = bot.state.signatures  # kept 6 min: Bolt refuses older timestamps

    @app.post(path, include_in_schema=False)
    async def slack_events(request: Request) -> Response:
        if not request.headers.get("x-slack-request-timestamp", "").isdigit():
            return Response("missing or malformed Slack request timestamp", status_code=401)
        try:
            text = (await request.body()).decode("utf-8")
        except UnicodeDecodeError:
            return Response("the body is not UTF-8", status_code=400)
        ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if ctype == "application/json":
            try:
                envelope = json.loads(text)
            except ValueError:
                envelope = None
            if not isinstance(envelope, dict):
                return Response("the body is not a JSON object", status_code=400)
        elif ctype != "application/x-www-form-urlencoded":
            return Response("Slack sends JSON or form-encoded bodies", status_code=415)
        # a forged signature recorded here is harmless: it never equals a real one
        if ctype == "application/x-www-form-urlencoded" and not signatures.add(
            request.headers.get("x-slack-signature", "")
        ):
            return Response("replayed Slack request", status_code=401)
        return await handler.handle(request)

    app.state.slack_bot = bot
    return bot


def run_socket_mode(
    settings: Settings, engine_factory: EngineFactory | None = None, records: Records | None = None
) -> None:
    """Serve the bot over Socket Mode (``xapp-`` token; no public URL needed). Blocks."""
    from slack_bolt.adapter.socket_mode import SocketModeHandler

    if not settings.slack_app_token:
        raise ConfigError("Socket Mode needs TRIAGE_SLACK_APP_TOKEN (an xapp- app-level token)")
    factory, recs = _defaults(settings, engine_factory, records)
    bot = SlackTriageBot(settings, factory, recs, socket_mode=True)
    SocketModeHandler(bot.app, reveal(settings.slack_app_token), web_client=bot.client).start()


__all__ = [
    "SlackTriageBot",
    "allowed_response_url",
    "make_client",
    "mount_slack",
    "run_socket_mode",
]
