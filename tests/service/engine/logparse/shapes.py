"""Crash-log shapes users paste, written by hand after real SGLang 0.5.11 output.

Shared by the parser tests (test_logparse_shapes.py) and the HTTP test that none of
them is refused (tests/service/api/test_api_shapes.py).
"""

from __future__ import annotations

SITE = "/usr/local/lib/python3.12/dist-packages/sglang"
#: the seed crash of 0.5.11: a bare assert in ServerArgs._handle_speculative_decoding
TRACEBACK = f'''Traceback (most recent call last):
  File "<frozen runpy>", line 198, in _run_module_as_main
  File "{SITE}/launch_server.py", line 24, in <module>
    server_args = prepare_server_args(sys.argv[1:])
                  ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
  File "{SITE}/srt/server_args.py", line 7299, in prepare_server_args
    return ServerArgs.from_cli_args(raw_args)
  File "{SITE}/srt/server_args.py", line 6685, in from_cli_args
    return cls(**{{attr: getattr(args, attr) for attr in attrs}})
  File "<string>", line 321, in __init__
  File "{SITE}/srt/server_args.py", line 882, in __post_init__
    self._handle_speculative_decoding()
  File "{SITE}/srt/server_args.py", line 3519, in _handle_speculative_decoding
    assert (
AssertionError'''


def prefixed(prefix: str, suffix: str = "") -> str:
    """:data:`TRACEBACK` with ``prefix`` before and ``suffix`` after every line."""
    return "\n".join(f"{prefix}{line}{suffix}" for line in TRACEBACK.splitlines()) + "\n"


#: shape -> log whose traceback ends in the bare assert at server_args.py:3519
PREFIXED = {
    "rich_launcher_column": prefixed("INFO [worker_0] 0: ", "          launcher.py:123"),
    "journald": prefixed("Dec 03 12:00:01 gpu-node-7 python3[1234]: "),
    "journald_short_iso": prefixed("2026-12-03T12:00:01+0000 gpu-node-7 python3[1234]: "),
    "docker_compose": prefixed("sglang-1  | "),
    "slurm_rank": prefixed("0: "),
    "torch_rank": prefixed("[rank0]: "),
    "ray_actor": prefixed("(SGLangWorker pid=1234) "),
    "ray_pid": prefixed("(pid=1234, ip=10.0.0.7) "),
    "bracketed_timestamp": prefixed("[2026-01-02 10:00:00 TP0] "),
    "iso_timestamp": prefixed("2026-01-02T10:00:00.123456Z "),
}

USAGE = (
    "usage: launch_server.py [-h] --model-path MODEL_PATH [--tokenizer-path TOKENIZER_PATH]\n"
    "                        [--tp-size TP_SIZE] [--speculative-algorithm {EAGLE,EAGLE3}]\n"
)
ARGPARSE = {
    "indented_error": USAGE
    + "    launch_server.py: error: unrecognized arguments: --speculative-topk 4\n",
    "unrecognized_without_error_prefix": "unrecognized arguments: --speculative-topk 4\n",
    "launch_server_error": "launch_server.py: error: argument --attention-backend: invalid "
    "choice: 'fa9' (choose from 'triton', 'torch_native', 'fa3')\n",
}
#: a real 0.5.11 message (server_args.py:3535) with no type and no traceback
BARE_MESSAGE = "trtllm_mha backend only supports topk = 1 for speculative decoding.\n"
#: a real 0.5.11 assert message (server_args.py:2972), indented, without a traceback
ASSERT_MESSAGE = (
    "  AssertionError: The expert parallel size must be 1 or the same as the tensor parallel size\n"
)
#: the traceback cut before its exception line
CUT = "\n".join(TRACEBACK.splitlines()[:-1]) + "\n"
COMMANDS = {
    "prompt_flags": "$ --model-path /models/Kimi-K2.6 --tp 8 --speculative-algorithm EAGLE3 "
    "--speculative-eagle-topk 4\n",
    "flags_line": "--tp 8 --speculative-algorithm EAGLE3 --speculative-eagle-topk 4 "
    "--speculative-num-draft-tokens 8\n",
    "yaml_args": "args:\n  - --model-path\n  - /models/Kimi-K2.6\n  - --tp\n  - '8'\n"
    "  - --speculative-algorithm\n  - EAGLE3\n",
    "json_args": '["--model-path", "/models/Kimi-K2.6", "--tp", "8", '
    '"--speculative-algorithm", "EAGLE3"]\n',
    "env_prefix": "SGLANG_ENABLE_JIT_DEEPGEMM=0 python -m sglang.launch_server --model-path "
    "/models/Kimi-K2.6 --tp 8 --speculative-algorithm EAGLE3\n",
}
JUNK = "hello, the server is broken again\nany idea what happened?\n"

#: every shape that must be answered (never a 422)
ALL = {
    **PREFIXED,
    **ARGPARSE,
    "bare_message": BARE_MESSAGE,
    "assert_message": ASSERT_MESSAGE,
    "cut_traceback": CUT,
    **COMMANDS,
}
