"""What runs inside the sandboxed replay child (stdlib only, plus the release and its stubs).

These modules are scripts: :mod:`service.replay.launch` starts ``runner.py`` (the cold
runner, one per batch) or ``serve.py`` (a warm worker of :mod:`service.replay.pool`) by
path, in the sandbox, where they import each other by bare name (this folder is
``sys.path[0]`` when the script starts) and never import ``service``:

* ``runner.py``: setup (stubs, declared hardware, importing SGLang), validation of one
  command line in a fork, the cold runner's ``main``;
* ``serve.py``: the warm worker's loop (one JSON job per line, a fork each);
* ``verdicts.py``: SGLang's verdict or the harness's problem (classification);
* ``guard.py``: the child's own guards (argv re-check with the real parser, remote code,
  network, leftover processes) and the release's option table;
* ``values.py``: ServerArgs fields as JSON;
* ``probes.py``, ``probe_state.py``, ``probe_moe.py``: start-up probes past validation.

Unit tests import them as ``service.replay.child.<name>``; this file imports nothing.
"""
