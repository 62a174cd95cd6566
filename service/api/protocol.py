"""uvicorn's HTTP protocols with a header timeout (``sglang-triage serve``).

uvicorn closes an idle keep-alive connection, but a connection that sends its request
line and headers a byte at a time is never closed: each byte cancels the keep-alive
timer, and the app (and its body timeout, :mod:`service.api.guard`) only starts once the
headers are complete. A few thousand such connections hold the server's sockets.

:class:`HeaderTimeoutH11` and :class:`HeaderTimeoutHttpTools` arm a timer
(``TRIAGE_HEADER_TIMEOUT_S``) when a connection opens and again whenever it has answered
a request and waits for the next one; the timer is disarmed when a request's headers are
complete. If it fires first, the connection is closed. :func:`protocol_path` names the
class for ``uvicorn.run(http=...)`` as an import string (workers are separate processes).
"""

from __future__ import annotations

import asyncio
import importlib.util
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol

__all__ = ["HeaderTimeoutH11", "HeaderTimeoutHttpTools", "protocol_path"]


def _timeout_s() -> float:
    from service.settings import get_settings

    return get_settings().header_timeout_s


class _HeaderTimeout:
    """Mixin over a uvicorn HTTP protocol: see the module docstring."""

    header_timeout_s: float | None = None  # None: read from the settings
    _header_timer: asyncio.TimerHandle | None = None

    def _in_request(self) -> bool:
        cycle = getattr(self, "cycle", None)
        return cycle is not None and not cycle.response_complete

    def _arm(self) -> None:
        self._disarm()
        seconds = self.header_timeout_s if self.header_timeout_s is not None else _timeout_s()
        loop: asyncio.AbstractEventLoop = self.loop  # type: ignore[attr-defined]
        self._header_timer = loop.call_later(seconds, self._headers_too_slow)

    def _disarm(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _headers_too_slow(self) -> None:
        self._header_timer = None
        transport: asyncio.Transport = self.transport  # type: ignore[attr-defined]
        if not self._in_request() and not transport.is_closing():
            transport.close()

    def connection_made(self, transport: Any) -> None:
        super().connection_made(transport)  # type: ignore[misc]
        self._arm()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)  # type: ignore[misc]
        if self._in_request():  # the headers are complete: the app's own limits apply
            self._disarm()

    def on_response_complete(self) -> None:
        super().on_response_complete()  # type: ignore[misc]
        if not self.transport.is_closing():  # type: ignore[attr-defined]
            self._arm()  # waiting for the next request's headers

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)  # type: ignore[misc]


class HeaderTimeoutH11(_HeaderTimeout, H11Protocol):
    """uvicorn's h11 protocol with a header timeout."""


if importlib.util.find_spec("httptools") is not None:
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    class HeaderTimeoutHttpTools(_HeaderTimeout, HttpToolsProtocol):
        """uvicorn's httptools protocol with a header timeout."""

else:  # pragma: no cover - httptools is optional for uvicorn
    HeaderTimeoutHttpTools = HeaderTimeoutH11  # type: ignore[misc, assignment]


def protocol_path() -> str:
    """The import string of the protocol ``serve`` uses (httptools when installed, as
    uvicorn's ``auto`` would choose)."""
    name = "HeaderTimeoutHttpTools" if importlib.util.find_spec("httptools") else "HeaderTimeoutH11"
    return f"{__name__}:{name}"
