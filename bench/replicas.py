"""Benchmark: resumes per second with one and two replicas, and memory while runs wait.

1. Resume throughput. ``--runs`` paused runs (one gated ``restart_service`` call each) are
   seeded through the bot itself: a mention per run, ``--in-flight`` runs in progress at a
   time, until every card is posted. Then one Approve click per card, built and signed
   beforehand, is sent over one client session (with two replicas the clicks alternate
   between them), ``--clicks-in-flight`` runs per replica clicked and not yet answered (see
   :func:`approve_all` for why not as fast as acknowledged). A resume counts when the
   run's answer is posted in its thread (the run is completed in the database by then; both
   are checked at the end). Configurations: SQLite with one process;
   PostgreSQL with one and with two replicas (a fresh database each).
2. Memory. One ``serve`` process on each database; its resident set (``VmRSS``) and peak
   (``VmHWM``) from ``/proc/PID/status`` with 0, 1,000, 5,000 and 10,000 paused runs, seeded
   through it the same way. Paused runs live in the database, so both should stay flat.

The bots are real ``approval-bot serve`` processes (``tests/support/serve_process.py``) with
llm-echo as their model, so the model costs nothing; Slack is our Slack-compatible server, in this
process, which also sends the load. Everything talks over 127.0.0.1 and every wait has a
deadline, so the benchmark stops by itself.

Run: ``.venv/bin/python bench/replicas.py [--runs 1000] [--rss-checkpoints 0,1000,5000,10000]
[--postgres URL]`` (PostgreSQL parts are skipped without a URL, or
``$APPROVAL_BOT_TEST_POSTGRES_URL``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("LLM_USER_PATH", tempfile.mkdtemp(prefix="approval-bot-bench-"))


from bench.figures import percentile
from bench.process_stats import BackendCpu, cpu_seconds, machine_busy_seconds, memory_kib
from bench.replica_setup import (
    SlackWatch,
    approve_all,
    replicas,
    seed_paused_runs,
    service_name,
    signed_click,
)
from bench.slack_latency import postgres_database
from storage.repository import Repository


def milliseconds(values: list[float]) -> dict[str, float]:
    return {
        "p50": round(statistics.median(values) * 1000, 1),
        "p99": round(percentile(values, 99) * 1000, 1),
    }


async def resume_throughput(
    label: str,
    database_url: str,
    workdir: Path,
    replica_count: int,
    runs: int,
    in_flight: int,
    clicks_in_flight: int,
) -> dict[str, Any]:
    services = [service_name(i) for i in range(runs)]
    async with replicas(replica_count, database_url, workdir) as bots:
        slack = bots[0].slack
        watch = SlackWatch(slack)
        async with watch.watching():
            seed_seconds = await seed_paused_runs(slack, watch, services, in_flight)
            clicks = [signed_click(slack, watch.cards[s], s) for s in services]
            load_before = os.getloadavg()[0]
            async with BackendCpu(database_url) as postgres:
                bot_cpu = [cpu_seconds(bot.process.pid) for bot in bots]
                own_cpu = time.process_time()
                machine = machine_busy_seconds()
                window = time.monotonic()
                repeated = await approve_all(bots, slack, watch, clicks, clicks_in_flight)
                await watch.until(
                    lambda: len(watch.answers) == runs,
                    timeout=max(120.0, runs * 0.5),
                    what=f"{runs} answers",
                )
                bot_cpu = [
                    cpu_seconds(b.process.pid) - c for b, c in zip(bots, bot_cpu, strict=True)
                ]
                own_cpu = time.process_time() - own_cpu
                busy, every = (a - b for a, b in zip(machine_busy_seconds(), machine, strict=True))
                window = time.monotonic() - window
            load_after = os.getloadavg()[0]
            await watch.quiet()
        repo = await Repository.open(database_url, upgrade=False)
        try:
            counts = await repo.status_counts()
        finally:
            await repo.close()
    first_sent = min(c.sent_at for c in clicks)
    last_ack = max(c.sent_at + c.ack_seconds for c in clicks)
    answered_at = {s: times[0] for s, times in watch.answers.items()}
    elapsed = max(answered_at.values()) - first_sent
    problems = check_outcome(runs, watch, counts)
    return {
        "configuration": label,
        "runs": runs,
        "seed_seconds": round(seed_seconds, 1),
        "resumes_per_second": round(runs / elapsed, 1),
        "seconds_for_all": round(elapsed, 2),
        "clicks_acknowledged_in_seconds": round(last_ack - first_sent, 2),
        "clicks_repeated_after_try_again": repeated,
        "ack_ms": milliseconds([c.ack_seconds for c in clicks]),
        "click_to_answer_ms": milliseconds([answered_at[c.service] - c.sent_at for c in clicks]),
        "bot_cpu_ms_per_resume": round(sum(bot_cpu) / runs * 1000, 2),
        "bot_cpu_share_per_replica": [round(c / elapsed, 2) for c in bot_cpu],
        "benchmark_process_cpu_ms_per_resume": round(own_cpu / runs * 1000, 2),
        "postgres_cpu_ms_per_resume": round(postgres.seconds / runs * 1000, 2),
        "machine_busy_cores": round(busy / every * (os.cpu_count() or 1), 2),
        # What else ran meanwhile (other users' work): busy cores less ours.
        "other_work_cores": round(
            busy / every * (os.cpu_count() or 1)
            - (sum(bot_cpu) + own_cpu + postgres.seconds) / window,
            2,
        ),
        "load_average_1m": [round(load_before, 2), round(load_after, 2)],
        "database_counts": counts,
        "problems": problems,
    }


def check_outcome(runs: int, watch: SlackWatch, counts: dict[str, dict[str, int]]) -> list[str]:
    """Every run answered once and completed; every approval executed once."""
    problems = []
    twice = [s for s, times in watch.answers.items() if len(times) > 1]
    if twice:
        problems.append(f"{len(twice)} runs answered more than once, e.g. {twice[:3]}")
    if counts["runs"] != {"completed": runs}:
        problems.append(f"runs by status: {counts['runs']}")
    if counts["approvals"] != {"executed": runs}:
        problems.append(f"approvals by status: {counts['approvals']}")
    return problems


async def memory_while_paused(
    label: str, database_url: str, workdir: Path, checkpoints: list[int], in_flight: int
) -> dict[str, Any]:
    """One process's memory with more and more paused runs held (in the database)."""
    rows = []
    async with replicas(1, database_url, workdir) as bots:
        bot, slack = bots[0], bots[0].slack
        watch = SlackWatch(slack)
        async with watch.watching():
            seeded = 0
            for target in checkpoints:
                services = [service_name(i) for i in range(seeded, target)]
                seconds = await seed_paused_runs(slack, watch, services, in_flight)
                seeded = target
                await asyncio.sleep(1.0)
                memory = memory_kib(bot.process.pid)
                rows.append(
                    {
                        "paused_runs": target,
                        "rss_mib": round(memory["VmRSS"] / 1024, 1),
                        "peak_rss_mib": round(memory["VmHWM"] / 1024, 1),
                        "seed_seconds": round(seconds, 1),
                    }
                )
                print(f"  {label}: {rows[-1]}", file=sys.stderr)
        repo = await Repository.open(database_url, upgrade=False)
        try:
            counts = await repo.status_counts()
        finally:
            await repo.close()
    if counts["runs"] != ({"paused": seeded} if seeded else {}):
        raise RuntimeError(f"{label}: expected {seeded} paused runs, found {counts['runs']}")
    return {"configuration": label, "checkpoints": rows}


# -- report ------------------------------------------------------------------------------------


def print_report(
    throughput: list[dict[str, Any]], memory: list[dict[str, Any]], load: list[float]
) -> None:
    before, after = (", ".join(f"{n:.2f}" for n in sample) for sample in (load[:3], load[3:]))
    print(f"\n{os.cpu_count()} cores; load average (1, 5, 15 min): {before} before, {after} after")
    print(
        "\n| configuration | runs | resumes/s | all resumed in | click ack p50 / p99 "
        "| click→answer p50 / p99 | CPU per resume: bots / PostgreSQL / Slack and load "
        "| other work (cores) | clicks repeated |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for row in throughput:
        ack, answer = row["ack_ms"], row["click_to_answer_ms"]
        print(
            f"| {row['configuration']} | {row['runs']:,} | {row['resumes_per_second']} "
            f"| {row['seconds_for_all']} s | {ack['p50']} / {ack['p99']} ms "
            f"| {answer['p50']:,} / {answer['p99']:,} ms "
            f"| {row['bot_cpu_ms_per_resume']} / {row['postgres_cpu_ms_per_resume']} / "
            f"{row['benchmark_process_cpu_ms_per_resume']} ms | {row['other_work_cores']} "
            f"| {row['clicks_repeated_after_try_again']} |"
        )
    by_label = {row["configuration"]: row for row in throughput}
    one, two = by_label.get("PostgreSQL, 1 replica"), by_label.get("PostgreSQL, 2 replicas")
    if one and two:
        speedup = two["resumes_per_second"] / one["resumes_per_second"]
        verdict = "met" if speedup >= 1.6 else "not met"
        print(f"\nSpeed-up from 1 to 2 replicas: {speedup:.2f}x (goal >= 1.6x: {verdict})")
        print(
            f"Most this machine allows, from the CPU each resume costs: {cpu_bound(one, two):.2f}x"
        )
    for row in throughput:
        if row["problems"]:
            print(f"\nPROBLEMS in {row['configuration']}: {row['problems']}")
    for entry in memory:
        print(f"\n{entry['configuration']}: one serve process")
        print("| paused runs | VmRSS | VmHWM (peak) |")
        print("| --- | --- | --- |")
        for point in entry["checkpoints"]:
            print(
                f"| {point['paused_runs']:,} | {point['rss_mib']} MiB "
                f"| {point['peak_rss_mib']} MiB |"
            )


def cpu_bound(one: dict[str, Any], two: dict[str, Any]) -> float:
    """The speed-up the machine's cores allow, were nothing else running on them.

    One replica can use at most one core; the Slack double, the load and PostgreSQL share
    the machine with the replicas. Per resume: bots ``b``, everything else ``o`` (ms of CPU).
    """
    cores = os.cpu_count() or 1

    def per_resume(row: dict[str, Any]) -> tuple[float, float]:
        other = row["postgres_cpu_ms_per_resume"] + row["benchmark_process_cpu_ms_per_resume"]
        return row["bot_cpu_ms_per_resume"], other

    b1, o1 = per_resume(one)
    b2, o2 = per_resume(two)
    one_replica = min(1000 / b1, cores * 1000 / (b1 + o1))
    two_replicas = min(2 * 1000 / b2, cores * 1000 / (b2 + o2))
    return two_replicas / one_replica


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1000, help="paused runs to resume")
    parser.add_argument(
        "--in-flight",
        type=int,
        default=8,
        help="runs in progress while seeding (mentioned, card not yet posted)",
    )
    parser.add_argument(
        "--clicks-in-flight",
        type=int,
        default=32,
        help="runs per replica clicked and not yet answered",
    )
    parser.add_argument(
        "--rss-checkpoints",
        default="0,1000,5000,10000",
        help="paused-run counts at which memory is read; empty to skip",
    )
    parser.add_argument(
        "--throughput",
        default="sqlite,postgres1,postgres2",
        help="which resume measurements to make (sqlite, postgres1, postgres2); empty to skip",
    )
    parser.add_argument("--postgres", default=os.environ.get("APPROVAL_BOT_TEST_POSTGRES_URL"))
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    checkpoints = [int(n) for n in args.rss_checkpoints.split(",") if n.strip()]
    wanted = {name.strip() for name in args.throughput.split(",")}

    load = list(os.getloadavg())
    throughput: list[dict[str, Any]] = []
    memory: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)

        async def measure_on(label: str, database: str, replica_count: int) -> None:
            print(f"{label}: seeding {args.runs} paused runs, then resuming…", file=sys.stderr)
            row = await resume_throughput(
                label,
                database,
                workdir,
                replica_count,
                args.runs,
                args.in_flight,
                args.clicks_in_flight,
            )
            print(f"  {json.dumps(row)}", file=sys.stderr)
            throughput.append(row)

        if "sqlite" in wanted:
            await measure_on("SQLite, 1 process", f"sqlite:///{workdir / 'resume.db'}", 1)
        for replica_count in (1, 2):
            if f"postgres{replica_count}" in wanted and args.postgres:
                label = f"PostgreSQL, {replica_count} replica{'s' if replica_count > 1 else ''}"
                async with postgres_database(args.postgres) as url:
                    await measure_on(label, url, replica_count)
        if checkpoints:
            print(f"memory: seeding up to {checkpoints[-1]} paused runs…", file=sys.stderr)
            memory.append(
                await memory_while_paused(
                    "SQLite",
                    f"sqlite:///{workdir / 'memory.db'}",
                    workdir,
                    checkpoints,
                    args.in_flight,
                )
            )
            if args.postgres:
                async with postgres_database(args.postgres) as url:
                    memory.append(
                        await memory_while_paused(
                            "PostgreSQL", url, workdir, checkpoints, args.in_flight
                        )
                    )
    load += os.getloadavg()
    print_report(throughput, memory, load)
    if args.json:
        figures = {"throughput": throughput, "memory": memory, "load_average": load}
        args.json.write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    asyncio.run(main())
