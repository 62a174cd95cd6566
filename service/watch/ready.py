"""What marks a start-up attempt's end in SGLang's own output.

A launch is *ready* once SGLang logs its ready line ("The server is fired up and ready
to roll!", logged by ``sglang/srt/entrypoints/http_server.py`` since 0.1.x and by the
gRPC and diffusion servers too). A crash before that line is a start-up crash; a crash
after it is not. A new attempt starts where a launch command or SGLang's first start-up
lines appear again (a restart policy relaunching the same command).
"""

from __future__ import annotations

import re

__all__ = ["READY_MARKERS", "is_ready_line", "is_start_line"]

#: substrings SGLang logs once the server accepts requests
READY_MARKERS = ("The server is fired up and ready to roll!",)

# the first lines a launch prints: the command (launch_server / sglang serve), the
# resolved ``server_args=ServerArgs(`` line, a systemd/journald "Started ..." line
_START_RE = re.compile(
    r"(?:python[\d.]*\s+-m\s+sglang\.launch_server\b|\bsglang\s+serve\b|"
    r"\bserver_args=ServerArgs\(|systemd\[\d+\]: Started\b)"
)


def is_ready_line(line: str) -> bool:
    """Does ``line`` say the server is up (any log prefix allowed)?"""
    return any(m in line for m in READY_MARKERS)


def is_start_line(line: str) -> bool:
    """Does ``line`` look like the first output of a new launch attempt?"""
    return _START_RE.search(line[:4000]) is not None
