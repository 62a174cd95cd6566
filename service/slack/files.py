"""Uploaded files and snippets as crash-log text: fetched with the bot token, only from
Slack's file host (or the configured API host), text only, within the body limit."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

import httpx
from slack_sdk import WebClient

from kb.errors import TriageError
from service.errors import LogParseError
from service.settings import Settings, reveal

__all__ = ["FILE_HOSTS", "TEXT_FILETYPES", "allowed_file_url", "fetch_files"]

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


def fetch_files(client: WebClient, settings: Settings, files: list[dict[str, Any]]) -> list[str]:
    """The text of the uploaded files/snippets (at most three), fetched with the bot token.
    Raises a :class:`LogParseError` saying why a file cannot be read."""
    out: list[str] = []
    limit = settings.max_body_bytes
    for f in files[:3]:
        if not f.get("url_private_download") and f.get("id"):
            f = {**f, **(client.files_info(file=f["id"]).get("file") or {})}
        url = f.get("url_private_download") or f.get("url_private")
        mimetype, filetype = str(f.get("mimetype") or ""), str(f.get("filetype") or "")
        if not url or not (
            mimetype.startswith("text/") or filetype in TEXT_FILETYPES or f.get("mode") == "snippet"
        ):
            raise _input_error(f"{f.get('name', 'the file')} is not a text file")
        if int(f.get("size") or 0) > limit:
            raise _input_error(f"{f.get('name', 'the file')} is over {limit} bytes")
        if not allowed_file_url(url, settings):
            raise _input_error("refusing to fetch a file from outside Slack")
        resp = httpx.get(
            url,
            headers={"Authorization": f"Bearer {reveal(settings.slack_bot_token)}"},
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


def allowed_file_url(url: str, settings: Settings) -> bool:
    """Is ``url`` on Slack's file host (https) or the configured Slack API host?"""
    parts = urlsplit(url)
    hosts = set(FILE_HOSTS)
    if settings.slack_api_url:
        hosts.add(urlsplit(settings.slack_api_url).netloc)
    return parts.netloc in hosts and (parts.scheme == "https" or parts.netloc not in FILE_HOSTS)


def _input_error(message: str) -> TriageError:
    return LogParseError(message)
