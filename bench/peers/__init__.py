"""Side by side: the same pause -> persist -> decide -> resume cycle on approval-bot and its peers.

Run: ``.venv/bin/python -m bench.peers --cycles 2000`` (after ``pip install -e '.[peers]'``).

Every peer does one cycle per round, in a rotating order, in one process and one sitting, on
its own SQLite file (WAL) in one directory, with the model played by a deterministic fake
whose own time is measured and subtracted. The whole table runs at ``synchronous = NORMAL``
and then at ``FULL``; a second table puts approval-bot at the durability it ships (NORMAL,
its ``executing`` commit at FULL) beside every peer at FULL: the durability at which what each
stored before the tool ran survives a power cut, as an at-most-once promise needs. The
targets of issue 11 are judged from the same run. See docs/benchmarks.md ("Side by side") for
what each peer does.
"""
