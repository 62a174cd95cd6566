"""Cutting recorded streams into start-up attempts: prefixes, start lines, crashes, ranks, bounds."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from service.watch.attempts import (
    HEAD_CHARS,
    HEAD_LINES,
    MAX_SOURCES,
    SETTLE_LINES,
    TAIL_CHARS,
    TAIL_LINES,
    Attempt,
    Segmenter,
    strip_line,
)

STREAMS = Path(__file__).parent / "streams"
LOOPS = [
    "loop_journald_iso.log",
    "loop_compose.log",
    "loop_kubectl.log",
    "loop_slurm_ranks.log",
    "loop_ray.log",
    "loop_rich_launcher.log",
]


def segment(lines: list[str] | Iterator[str]) -> tuple[Segmenter, list[Attempt]]:
    seg = Segmenter()
    done: list[Attempt] = []
    for line in lines:
        done += seg.feed(line)
    return seg, done + seg.close()


def stream(name: str) -> list[str]:
    return (STREAMS / name).read_text().splitlines()


@pytest.mark.parametrize(
    ("raw", "text", "source"),
    [
        (
            'May 02 10:14:03 ct200 sglang-launch[48211]:   File "x.py", line 1, in f',
            '  File "x.py", line 1, in f',
            None,
        ),
        (
            "2026-05-03T08:00:09+0000 gpu-node-7 python3[7100]: AssertionError",
            "AssertionError",
            None,
        ),
        (
            "[pod/sglang-7d9f/sglang] Traceback (most recent call last):",
            "Traceback (most recent call last):",
            None,
        ),
        ("sglang-1  | AssertionError", "AssertionError", "svc:sglang-1"),
        ("[rank3]: AssertionError", "AssertionError", "rank:3"),
        ("(SGLangWorker pid=4101, ip=10.0.0.7)     assert (", "    assert (", "pid:4101"),
        ("(pid=77) x", "x", "pid:77"),
        (
            "ERROR [worker_1] 1: ValueError: no         launcher.py:123",
            "ValueError: no",
            "worker_1:1",
        ),
        # docker logs -t: only the timestamp goes; "INFO foo:" is not a journald host and unit
        ("2026-05-03T08:00:09.123456789Z INFO foo: bar", "INFO foo: bar", None),
        (
            "2026-05-03T08:00:09Z [2026-05-03 08:00:09] INFO x.py:1: y",
            "[2026-05-03 08:00:09] INFO x.py:1: y",
            None,
        ),
        ("    indented stays", "    indented stays", None),
        ("\x1b[31mAssertionError\x1b[0m", "AssertionError", None),
    ],
)
def test_prefixes_are_stripped_and_name_the_source(raw: str, text: str, source: str | None) -> None:
    line = strip_line(raw)
    assert (line.text, line.source) == (text, source)


def test_bare_ranks_are_stripped_only_while_the_stream_carries_them() -> None:
    seg, _ = segment(
        ["0: Traceback (most recent call last):", "1: Traceback (most recent call last):"]
    )
    assert seg.current is not None
    assert [ln.source for ln in seg.current.lines()] == ["rank:0", "rank:1"]
    seg, _ = segment(["loading"] * 20 + ["3: not a rank"])
    assert seg.current is not None and seg.current.lines()[-1].source is None


@pytest.mark.parametrize("name", LOOPS)
def test_each_restart_is_one_attempt_with_one_crash(name: str) -> None:
    seg, done = segment(stream(name))
    assert seg.count == 3
    assert [a.index for a in done] == [1, 2, 3]
    assert all(a.crash in ("traceback", "argparse") and not a.up for a in done)
    assert len({a.presignature("startup_crash") for a in done}) == 1  # the same crash, 3 times


@pytest.mark.parametrize(
    ("name", "sources"),
    [
        ("loop_slurm_ranks.log", {"rank:0"}),
        ("loop_ray.log", {"pid:4101", "pid:4111", "pid:4121"}),
        ("loop_rich_launcher.log", {"worker_0:0"}),
        ("loop_compose.log", {"svc:sglang-1"}),
    ],
)
def test_interleaved_ranks_are_one_crash_triaged_from_one_rank(
    name: str, sources: set[str]
) -> None:
    _, done = segment(stream(name))
    assert {a.crash_source for a in done} == sources
    for attempt in done:
        lines = attempt.crash_lines()
        assert sum("Traceback (most recent call last)" in ln for ln in lines) == 1
        assert lines[-1].startswith(("AssertionError", "ValueError")) or any(
            ln.startswith(("AssertionError", "ValueError")) for ln in lines
        )
        assert (
            attempt.command is not None and "sglang.launch_server --model-path" in attempt.command
        )


def test_the_launch_command_is_found_and_the_warning_quoting_it_is_not_one() -> None:
    _, done = segment(stream("loop_journald_iso.log"))
    argv = done[0].argv()
    assert argv is not None and argv[:3] == ["python3", "-m", "sglang.launch_server"]
    assert "--speculative-eagle-topk" in argv and "trtllm_mha" in argv


def test_a_launch_prints_several_start_lines_in_one_attempt() -> None:
    lines = [
        "May 02 10:00:00 h systemd[1]: Started sglang.service - SGLang.",
        "May 02 10:00:00 h run[1]: $ python3 -m sglang.launch_server --model-path /m --tp 8",
        "May 02 10:00:01 h run[1]: /x/launch_server.py:54: UserWarning: 'python -m "
        "sglang.launch_server' is still supported, but 'sglang serve' is the recommended entrypoint.",
        "May 02 10:00:01 h run[1]:   Example: sglang serve --model-path <model> [options]",
        "May 02 10:00:02 h run[1]: [2026-05-02 10:00:02] server_args=ServerArgs(model_path='/m')",
        "May 02 10:00:03 h run[1]: [2026-05-02 10:00:03] Load weight begin.",
    ]
    seg, done = segment(lines)
    assert seg.count == 1 and done == []  # no crash, still loading at the end of the stream
    seg, _ = segment(lines + lines)  # printed again: the unit restarted
    assert seg.count == 2


def test_seed_stream_is_two_attempts_ended_by_systemd() -> None:
    seg, done = segment(stream("seed_journald.log"))
    assert seg.count == 2 and len(done) == 2
    assert [a.exit_code for a in done] == [1, 1]
    assert ["--speculative-eagle-topk" in (a.command or "") for a in done] == [True, False]
    assert all(
        a.crash_frame.endswith("server_args.py:3598:_handle_speculative_decoding") for a in done
    )
    assert done[0].presignature("startup_crash") != done[1].presignature("startup_crash")


def test_a_ready_server_that_crashes_later_is_up() -> None:
    _, done = segment(stream("ready_then_crash.log"))
    assert len(done) == 1 and done[0].up and done[0].crash == "traceback"
    assert done[0].crash_line.startswith("torch.OutOfMemoryError")


def test_a_chained_traceback_is_kept_whole_until_the_crash_settles() -> None:
    lines = [
        "$ python3 -m sglang.launch_server --model-path /m",
        "Traceback (most recent call last):",
        '  File "a.py", line 1, in f',
        "KeyError: 'x'",
        "",
        "During handling of the above exception, another exception occurred:",
        "",
        "Traceback (most recent call last):",
        '  File "b.py", line 2, in g',
        "ValueError: bad value",
        "sglang.service: Main process exited, code=exited, status=1/FAILURE",
    ]
    _, done = segment(lines)
    assert len(done) == 1 and done[0].crash_line == "KeyError: 'x'"
    assert done[0].crash_lines()[-2] == "ValueError: bad value"  # the triage reads the whole chain


def test_systemd_exits_without_a_traceback() -> None:
    killed = [
        "May 02 10:00:00 h systemd[1]: Started sglang.service - SGLang.",
        "May 02 10:00:05 h python3[9]: [2026-05-02 10:00:05 TP0] Load weight begin.",
        "May 02 10:01:05 h systemd[1]: sglang.service: Main process exited, code=killed, status=9/KILL",
    ]
    _, done = segment(killed)
    assert len(done) == 1 and done[0].crash == "exit" and done[0].exit_code is None
    clean = killed[:2] + [
        "May 02 10:01:05 h systemd[1]: sglang.service: Main process exited, "
        "code=exited, status=0/SUCCESS"
    ]
    _, done = segment(clean)
    assert [(a.crash, a.exit_code) for a in done] == [(None, 0)]  # exited cleanly: no crash


def test_without_start_lines_a_settled_crash_then_a_new_traceback_is_a_new_attempt() -> None:
    crash = ["Traceback (most recent call last):", '  File "a.py", line 1, in f', "AssertionError"]
    seg = Segmenter()
    settled = [a for line in crash for a in seg.feed(line)]
    assert settled == []  # a crash is complete only once the stream says so
    settled += seg.tick()  # the stream went quiet
    settled += [a for line in crash for a in seg.feed(line)] + seg.tick()
    assert [a.index for a in settled] == [1, 2]


def test_a_crash_settles_after_a_bounded_number_of_lines() -> None:
    lines = ["Traceback (most recent call last):", '  File "a.py", line 1, in f', "AssertionError"]
    seg = Segmenter()
    done = [a for line in lines + ["more output"] * (SETTLE_LINES + 1) for a in seg.feed(line)]
    assert len(done) == 1


def _many_lines(n: int) -> Iterator[str]:
    yield "$ python3 -m sglang.launch_server --model-path /m --tp 8"
    for i in range(n):
        yield f"{i % 7}: [2026-05-02 10:00:00 TP{i % 8}] loading shard {i} " + "w" * (i % 300)


def test_unbounded_input_keeps_bounded_state() -> None:
    seg = Segmenter()
    peak_kept = peak_chars = 0
    for n, line in enumerate(_many_lines(200_000)):
        seg.feed(line)
        if n % 1000 == 0 and seg.current is not None:
            peak_kept = max(peak_kept, len(seg.current.head) + len(seg.current.tail))
            peak_chars = max(peak_chars, seg.current.tail_chars)
    att = seg.current
    assert att is not None and att.lines_seen == 200_001
    assert len(att.head) == HEAD_LINES and len(att.tail) <= TAIL_LINES
    assert peak_kept <= HEAD_LINES + TAIL_LINES and peak_chars <= TAIL_CHARS
    assert att.dropped == 200_001 - HEAD_LINES - len(att.tail)
    assert att.head[0].text.startswith("$ python3 -m sglang.launch_server")  # the command stays


def test_long_lines_keep_bounded_characters_in_order() -> None:
    seg = Segmenter()
    for i in range(400):  # 400 lines of 60,000 characters: 24 MB
        seg.feed(f"{i:04d} " + "v" * 60_000)
    att = seg.current
    assert att is not None
    assert att.head_chars <= HEAD_CHARS and att.tail_chars <= TAIL_CHARS
    kept = [int(ln.text[:4]) for ln in att.lines()]
    assert kept == sorted(kept) and kept[0] == 0 and kept[-1] == 399
    assert sum(len(ln.text) for ln in att.lines()) <= HEAD_CHARS + TAIL_CHARS


def test_many_sources_keep_bounded_state() -> None:
    seg = Segmenter()
    for r in range(5 * MAX_SOURCES):
        seg.feed(f"[rank{r}]: Traceback (most recent call last):")
        seg.feed(f'[rank{r}]:   File "a.py", line {r}, in f')
    assert len(seg._tb) <= MAX_SOURCES and len(seg._last_frame) <= MAX_SOURCES
