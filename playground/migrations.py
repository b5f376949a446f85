"""The playground's long tool: a pretend migration of 200 tenants that checkpoints.

``migrate_tenants`` takes ~30 s (0.15 s a tenant), stores a checkpoint after each tenant and
shows its progress on the thread's progress message, so a visitor can watch it, stop the
playground half-way (Ctrl-C, or kill it) and start it again: the call carries on from the
last checkpoint by itself. Each migrated tenant is counted in the playground's state file
(``migrated``), so ``sql select * from migrated where times > 1`` shows what ran twice (at
most the tenant in flight when it stopped: checkpoint after each side effect).
"""

from __future__ import annotations

import os
import sqlite3
import time
from pathlib import Path

from bot.pauses import checkpoint, last_checkpoint, progress

TENANTS = 200
ITEM_SECONDS_ENV = "APPROVAL_BOT_DEMO_ITEM_SECONDS"


def _state_path() -> Path:
    return Path(os.environ.get("APPROVAL_BOT_DEMO_STATE", "playground-state.db"))


def _migrate(tenant: str) -> None:
    """The side effect: one tenant migrated (counted, to see what ran twice)."""
    with sqlite3.connect(_state_path()) as db:
        db.execute("CREATE TABLE IF NOT EXISTS migrated (tenant TEXT PRIMARY KEY, times INTEGER)")
        db.execute(
            "INSERT INTO migrated VALUES (?, 1) "
            "ON CONFLICT (tenant) DO UPDATE SET times = times + 1",
            (tenant,),
        )


def migrate_tenants(count: int = TENANTS) -> str:
    """Migrate tenants to the new schema, one by one (long: about 30 seconds for 200).
    Needs approval. Carries on from its last checkpoint after a restart."""
    if not 1 <= count <= 10_000:
        return "count must be between 1 and 10000"
    pause = float(os.environ.get(ITEM_SECONDS_ENV, "0.15"))
    state = last_checkpoint() or {"next": 0}
    for index in range(state["next"], count):
        time.sleep(pause)
        tenant = f"tenant-{index + 1:03d}"
        _migrate(tenant)
        checkpoint({"next": index + 1})  # after the side effect: it never runs twice before
        progress(index + 1, count, tenant)
    resumed = f" (resumed at tenant {state['next'] + 1})" if state["next"] else ""
    return f"migrated {count} tenants{resumed}"
