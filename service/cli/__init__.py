"""The ``sglang-triage`` command line (:mod:`service.cli.main`), ``lint`` and ``replay`` printing."""
