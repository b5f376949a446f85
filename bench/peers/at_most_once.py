"""The SQLite side-by-side at the durability an at-most-once promise needs, and issue 11's targets.

approval-bot runs as shipped (NORMAL, its ``executing`` commit at FULL), every other peer at
FULL: the setting at which what a peer stored before its tool ran survives a power cut. This
module picks those rows out of ``bench.peers``' parts and prints them; ``__main__`` runs the
parts.
"""

from __future__ import annotations

from typing import Any

BASELINE = "approval-bot"
# Rows at approval-bot's own durability in the at-most-once comparison (the floor replays
# its transactions, at the level each was committed at).
SHIPPED = (BASELINE, "approval-bot-sync-tool", "sqlite-floor")
AT_MOST_ONCE = "at-most-once"


def at_most_once(results: list[dict[str, Any]]) -> dict[str, Any] | None:
    """approval-bot at the durability its at-most-once promise needs, beside every peer at
    FULL (the setting at which what a peer stored before its tool ran survives a power cut).

    The bot needs its ``executing`` record on disk before the tool runs: at NORMAL it
    commits that one at FULL (its fsynced commits say whether it did). From the at-most-once
    part, where they ran interleaved; without it, from the NORMAL and FULL halves (the bot's
    NORMAL half if it raised that commit, else its FULL half). None without either.
    """
    by_setting = {r["synchronous"]: r["rows"] for r in results}
    normal = by_setting.get("NORMAL")
    if AT_MOST_ONCE in by_setting:
        part = by_setting[AT_MOST_ONCE]
        source = "interleaved in one part"
    elif "FULL" in by_setting:
        part = None
        source = "from the NORMAL and FULL halves"
    else:
        return None

    def shipped(key: str) -> tuple[dict[str, Any], str]:
        """The row at the durability approval-bot ships."""
        row = part[key] if part is not None else None
        if row is None:
            raised = normal is not None and (normal[key]["fsynced_commits_per_cycle"] or 0) >= 1
            row = normal[key] if raised and normal is not None else by_setting["FULL"][key]
        if row["synchronous"] == "NORMAL" and (row["fsynced_commits_per_cycle"] or 0) >= 1:
            return row, "NORMAL, the `executing` commit at FULL"
        return row, row["synchronous"]

    bot, bot_setting = shipped(BASELINE)
    rows = {}
    keys = part if part is not None else by_setting["FULL"]
    for key in keys:
        if key in SHIPPED:
            chosen, durability = shipped(key)
        else:
            chosen = part[key] if part is not None else by_setting["FULL"][key]
            durability = chosen["synchronous"]
        rows[key] = {
            "name": chosen["name"],
            "durability": durability,
            "p50_ms": chosen["p50_ms"],
            "p99_ms": chosen["p99_ms"],
            "cpu_ms": chosen["cpu_ms"],
            "ratio": chosen["p50_ms"] / bot["p50_ms"],
            "ratio_at_normal": (
                normal[key]["p50_ms"] / normal[BASELINE]["p50_ms"]
                if normal is not None and key not in SHIPPED
                else None
            ),
        }
    return {"approval_bot_durability": bot_setting, "source": source, "rows": rows}


def at_most_once_table(summary: dict[str, Any]) -> str:
    head = ["per cycle, ms", "durability", "p50", "p99", "CPU", "p50 ÷ approval-bot"]
    head.append("both at NORMAL: p50 ÷ approval-bot")
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for row in summary["rows"].values():
        at_normal = "" if row["ratio_at_normal"] is None else f"{row['ratio_at_normal']:.2f}×"
        cells = [row["name"], row["durability"], f"{row['p50_ms']:.2f}", f"{row['p99_ms']:.2f}"]
        cells.append(f"{row['cpu_ms']:.2f}")
        cells += [f"{row['ratio']:.2f}×", at_normal]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def targets(summary: dict[str, Any], results: list[dict[str, Any]]) -> list[str]:
    """Issue 11's targets, each met or not, from this run's figures."""
    bot = summary["rows"][BASELINE]
    lines = []

    def judge(ok: bool) -> str:
        return "met" if ok else "NOT met"

    lines.append(
        f"cycle p50 <= 1.0 ms at the at-most-once durability: {bot['p50_ms']:.2f} ms, "
        f"{judge(bot['p50_ms'] <= 1.0)}"
    )
    langgraph = summary["rows"].get("langgraph-default")
    if langgraph is not None:
        at_normal = langgraph["ratio_at_normal"]
        normal_text = "" if at_normal is None else f" (both at NORMAL: {at_normal:.2f}×)"
        lines.append(
            f">= 5× faster than LangGraph's default durability, both durable before the tool "
            f"(LangGraph at FULL): {langgraph['ratio']:.2f}×{normal_text}, "
            f"{judge(langgraph['ratio'] >= 5)}"
        )
    stored = results[0]["rows"][BASELINE]["bytes_at_pause"]
    if stored is not None:
        lines.append(f"<= 2 KB stored per paused run: {stored:,} bytes, {judge(stored <= 2048)}")
    lines.append(
        f"p99 <= 3× p50 at the at-most-once durability: {bot['p99_ms']:.2f} ms = "
        f"{bot['p99_ms'] / bot['p50_ms']:.1f}× p50, {judge(bot['p99_ms'] <= 3 * bot['p50_ms'])}"
    )
    return lines
