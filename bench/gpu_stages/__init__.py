"""The stages of ``bench/gpu.sh`` (``bench/gpu.py`` composes them into one run), one module each:

- :mod:`.common`: paths, constants and small helpers; :mod:`.record`: the run's record (``gpu.json``,
  ``gpu.md``, ``gpu.log``) and its subprocesses; :mod:`.report`: ``gpu.md``;
- :mod:`.env` (stage 1), :mod:`.data` (the corpus, queries and qrels), :mod:`.encoder` (stage 2),
  :mod:`.services` (redis-server and the workers), :mod:`.reindex` (stage 3), :mod:`.train`
  (stage 4), :mod:`.evaluation` (stage 5).

Standard library only at import time (torch and sdr_search are imported inside the device-side
commands), and imported by path from the working tree (``bench/`` on ``sys.path``): the device runs
a plain checkout with its own ``python3``, nothing installed."""
