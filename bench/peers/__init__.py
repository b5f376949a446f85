"""Side by side: the same pause -> persist -> decide -> resume cycle on approval-bot and its peers.

Run: ``.venv/bin/python -m bench.peers --cycles 2000`` (after ``pip install -e '.[peers]'``).

Every peer does one cycle per round, in a rotating order, in one process and one sitting, on
its own SQLite file (WAL) in one directory, with the model played by a deterministic fake
whose own time is measured and subtracted. The whole table runs at ``synchronous = NORMAL``
and then at ``FULL``. See docs/benchmarks.md ("Side by side") for what each peer does.
"""
