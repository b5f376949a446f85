"""Benchmark: one Approve click -> the run's final answer in its thread, black-box.

Issue 22 asks for click -> answer back to 15 ms p50 and for where that time goes. This
measures it on a real ``approval-bot serve`` (its own process, llm-echo as its model) against
the playground's Slack stand-in, which this process plays:

- Cards are seeded through the bot (one mention each, as users would) and the bot left quiet.
- Then one click at a time: the signed Approve click is built before the clock starts and
  sent from ``bench/burst_sender.py`` (a process of its own, so Slack's work for the bot is
  not timed on the loop that sends), and the figure is from the click leaving the sender to
  the Slack server receiving the call that puts the answer in the thread (``chat.update`` or
  ``chat.postMessage`` with the answer's text, or ``chat.stopStream`` of the run's stream).
  The server timestamps each call itself (wall clock, as the sender's).
- Every Slack call in between is kept, so the report also says at what point after the click
  each one arrived (the card's edit, the clicker's answer, the progress message, the answer):
  the black-box breakdown of where a click's time goes.
- ``--py-spy FILE`` attaches py-spy to the bot during the timed clicks (speedscope output);
  the load average is reported before and after, as on a shared machine every figure needs.

Run: ``.venv/bin/python bench/click_answer.py [--cards 60] [--postgres URL]
[--streaming off|auto] [--py-spy profile.json]``
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("LLM_USER_PATH", tempfile.mkdtemp(prefix="approval-bot-bench-"))

from bench.click_bursts import APPROVERS, Watch, burst_sender, seed_cards, signed_click
from bench.figures import summary
from bench.slack_latency import postgres_database, run_stopped_by_sigterm
from playground.slack_server import SlackServer
from tests.support.serve_process import served_bot

ANSWER_METHODS = ("chat.update", "chat.postMessage", "chat.stopStream")


def answer_call_at(slack: SlackServer, service: str, first_call: int, thread: str) -> float | None:
    """When the answer reached the thread: the first call after the click that carries
    ``restarted <service>`` (a stream's stop carries it in its chunks or blocks), or the
    stop of a stream in the card's thread."""
    needle = f"restarted {service}"
    for call in slack.calls[first_call:]:
        if call.method not in ANSWER_METHODS:
            continue
        text = json.dumps(call.args)
        if needle in text:
            return call.at
        if call.method == "chat.stopStream" and thread and thread in text:
            return call.at
    return None


def timeline(slack: SlackServer, first_call: int, first_response: int, sent_at: float) -> list:
    """Every Slack call and response-URL post after the click: (ms after it, what)."""
    events = [
        (round((c.at - sent_at) * 1000, 2), f"{c.method} {str(c.args.get('text', ''))[:40]!r}")
        for c in slack.calls[first_call:]
    ] + [
        (round((r.at - sent_at) * 1000, 2), f"response_url {str(r.body.get('text', ''))[:40]!r}")
        for r in slack.responses[first_response:]
    ]
    return sorted(events)


async def one_database(
    url: str,
    workdir: Path,
    cards: int,
    streaming: str,
    py_spy: str | None,
    source: str | None = None,
) -> dict[str, Any]:
    async with (
        served_bot(
            url, workdir, streaming=streaming, env={"PYTHONPATH": source} if source else None
        ) as served,
        burst_sender(workdir) as sender,
    ):
        slack = served.slack
        watch = Watch(slack)
        await sender.open_connections(f"{served.url}/healthz", 2)
        services = [f"r998s{i:03d}" for i in range(cards + 5)]
        seeded = await seed_cards(slack, watch, services)
        spy = None
        if py_spy:
            spy = subprocess.Popen(
                [
                    str(Path(sys.executable).with_name("py-spy")),
                    "record",
                    "--pid",
                    str(served.process.pid),
                    "--rate",
                    "1000",
                    "--format",
                    "speedscope",
                    "--output",
                    py_spy,
                    "--nonblocking",
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
            )
            await asyncio.sleep(1.0)
        waits: list[float] = []
        timelines: list[list] = []
        load_before = os.getloadavg()
        for index, (card, service) in enumerate(zip(seeded, services, strict=True)):
            click = signed_click(slack, APPROVERS[0], card, service)
            first_call, first_response = len(slack.calls), len(slack.responses)
            sent_at, _round_trip = await sender.send(served.url + "/slack/events", [click])
            thread = card.thread_ts or card.ts
            deadline = time.monotonic() + 30
            while (at := answer_call_at(slack, service, first_call, thread)) is None:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"no answer for {service}")
                await asyncio.sleep(0.001)
            await watch.quiet(0.05)
            if index < 5:
                continue  # warm-up: the first clicks pay for imports and caches
            waits.append(at - sent_at)
            timelines.append(timeline(slack, first_call, first_response, sent_at))
        load_after = os.getloadavg()
        if spy is not None:
            spy.send_signal(2)  # SIGINT: py-spy writes its file and stops
            _out, err = spy.communicate(timeout=60)
            if spy.returncode not in (0, None):
                print(f"py-spy: {err.decode(errors='replace')[-500:]}", file=sys.stderr)
    return {
        "streaming": streaming,
        "click_to_answer": summary(waits),
        "load_before": [round(x, 2) for x in load_before],
        "load_after": [round(x, 2) for x in load_after],
        "median_timeline": median_timeline(timelines),
    }


def median_timeline(timelines: list[list]) -> list[str]:
    """The calls of the typical click in order, each at the median of its position."""
    shapes: dict[tuple[str, ...], list[list]] = {}
    for line in timelines:
        shapes.setdefault(tuple(what for _, what in line), []).append(line)
    shape, lines = max(shapes.items(), key=lambda item: len(item[1]))
    return [
        f"{statistics.median(line[i][0] for line in lines):7.2f} ms  {what}"
        for i, what in enumerate(shape)
    ] + [f"({len(lines)} of {len(timelines)} clicks had this sequence)"]


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cards", type=int, default=60, help="timed clicks per database")
    parser.add_argument("--postgres", help="also on a scratch database of this server")
    parser.add_argument("--streaming", default="off", choices=["off", "auto"])
    parser.add_argument("--py-spy", help="speedscope profile of the bot (SQLite run) here")
    parser.add_argument("--only", choices=["sqlite", "postgres"])
    parser.add_argument(
        "--source",
        help="run the bot from this source tree (git archive main | tar -x -C DIR): "
        "a change measured beside what it changes, alternating in one sitting",
    )
    args = parser.parse_args()
    if args.py_spy and not Path(sys.executable).with_name("py-spy").exists():
        parser.error(f"--py-spy needs py-spy beside {sys.executable}: pip install py-spy")
    report: dict[str, Any] = {"cpus": os.cpu_count(), "source": args.source or "this tree"}
    with tempfile.TemporaryDirectory(prefix="click-answer-") as tmp:
        workdir = Path(tmp)
        if args.only != "postgres":
            (workdir / "sqlite").mkdir()
            report["sqlite"] = await one_database(
                f"sqlite:///{workdir}/click.db",
                workdir / "sqlite",
                args.cards,
                args.streaming,
                args.py_spy,
                args.source,
            )
            print(json.dumps(report["sqlite"], indent=1), file=sys.stderr)
        if args.postgres and args.only != "sqlite":
            (workdir / "pg").mkdir()
            async with contextlib.AsyncExitStack() as stack:
                url = await stack.enter_async_context(postgres_database(args.postgres))
                report["postgres"] = await one_database(
                    url,
                    workdir / "pg",
                    args.cards,
                    args.streaming,
                    args.py_spy + ".pg" if args.py_spy and args.only == "postgres" else None,
                    args.source,
                )
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    run_stopped_by_sigterm(main)
