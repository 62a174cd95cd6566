"""The ``sglang-triage`` command line (:mod:`service.cli.main`, its sub-commands by family:
``ingest_command``, ``serve``, ``launch``, ``worker``), ``lint`` and ``replay`` printing."""
