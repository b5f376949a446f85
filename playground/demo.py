"""The playground's offline demo: pretend ops tools, the demo's configuration, its model.

The tools keep their pretend state in the playground's own SQLite file, next to the bot's
database, so a restarted playground remembers how many replicas "payments" has. Their names
(``playground.demo:get_status`` and the others) are what the README's configuration example
and users' own files refer to. The model, a real ``llm.AsyncModel`` that needs no key
(registered as ``demo``), is in :mod:`playground.demo_model`.
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import threading
import urllib.request
from pathlib import Path
from typing import Any

import llm

from bot.pauses import WaitForCallback, callback_url
from playground.demo_model import DEMO_MODEL_ID, SERVICES, DemoModel

log = logging.getLogger(__name__)

# How long the pretend deploy pipeline takes before it reports back to its callback URL.
DEPLOY_SECONDS = 3.0
# -- the pretend infrastructure ----------------------------------------------------------


# In the playground's --data-dir (the playground sets APPROVAL_BOT_DEMO_STATE); elsewhere (the
# CLI run in that directory, `serve` with the demo tools) in the working directory.
DEMO_STATE_FILE = "playground-state.db"


def _state_path() -> Path:
    return Path(os.environ.get("APPROVAL_BOT_DEMO_STATE", DEMO_STATE_FILE))


def _connect() -> sqlite3.Connection:
    connection = sqlite3.connect(_state_path())
    connection.execute(
        "CREATE TABLE IF NOT EXISTS services (name TEXT PRIMARY KEY, replicas INTEGER, "
        "restarts INTEGER)"
    )
    connection.executemany(
        "INSERT OR IGNORE INTO services VALUES (?, 3, 0)", [(name,) for name in SERVICES]
    )
    connection.commit()
    return connection


def get_status(service: str) -> str:
    """Read the health and replica count of a service. Safe: never needs approval."""
    with _connect() as db:
        row = db.execute(
            "SELECT replicas, restarts FROM services WHERE name = ?", (service,)
        ).fetchone()
    if row is None:
        return f"{service}: no such service (known: {', '.join(SERVICES)})"
    return f"{service}: healthy, {row[0]} replicas, restarted {row[1]} times"


def restart_service(service: str, region: str | None = None) -> str:
    """Restart every replica of a service (in one region, if given). Needs approval."""
    with _connect() as db:
        updated = db.execute(
            "UPDATE services SET restarts = restarts + 1 WHERE name = ?", (service,)
        ).rowcount
    if not updated:
        return f"{service}: no such service"
    return f"restarted {service} in {region}" if region else f"restarted {service}"


def deploy_service(service: str) -> str:
    """Deploy the latest build of a service. The pipeline reports back when it is done."""
    if service not in SERVICES:
        return f"{service}: no such service (known: {', '.join(SERVICES)})"
    url = callback_url()
    pipeline = threading.Timer(DEPLOY_SECONDS, _report_deploy, args=(url, service))
    pipeline.daemon = True
    pipeline.start()
    raise WaitForCallback(f"the deploy of {service}", timeout="10m")


def _report_deploy(url: str, service: str) -> None:
    """The pretend pipeline, a few seconds later: POST its outcome to the callback URL."""
    body = json.dumps({"service": service, "status": "deployed", "build": "2026.11.30-1"})
    request = urllib.request.Request(
        url, data=body.encode(), headers={"Content-Type": "application/json"}, method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            answer.read()
    except OSError as exc:  # the playground stopped meanwhile: nothing to tell
        log.warning("the pretend pipeline could not report the deploy of %s: %s", service, exc)


MAX_REPLICAS = 50


def _scale_service(service: str, replicas: int, env: str = "prod") -> str:
    if not 0 <= replicas <= MAX_REPLICAS:
        raise ValueError(f"replicas must be between 0 and {MAX_REPLICAS}")
    if env == "staging":  # the pretend staging is not kept: it just says so
        return f"scaled {service} to {replicas} replicas in staging"
    with _connect() as db:
        updated = db.execute(
            "UPDATE services SET replicas = ? WHERE name = ?", (replicas, service)
        ).rowcount
    return f"scaled {service} to {replicas} replicas" if updated else f"{service}: no such service"


# A tool with its limits in its schema, so the gate refuses `scale checkout to 100000` before
# anyone is asked to approve it (a function's type hints cannot carry a maximum to llm).
scale_service = llm.Tool(
    name="scale_service",
    description="Change how many replicas of a service run. Needs approval.",
    input_schema={
        "type": "object",
        "properties": {
            "service": {"type": "string"},
            "replicas": {"type": "integer", "minimum": 0, "maximum": MAX_REPLICAS},
            "env": {"type": "string", "enum": ["prod", "staging"], "default": "prod"},
        },
        "required": ["service", "replicas"],
    },
    implementation=_scale_service,
)


def rotate_credentials(service: str) -> str:
    """Rotate the database credentials of a service. Two people must approve."""
    if service not in SERVICES:
        return f"{service}: no such service (known: {', '.join(SERVICES)})"
    with _connect() as db:
        db.execute(
            "CREATE TABLE IF NOT EXISTS credentials (service TEXT PRIMARY KEY, version INTEGER)"
        )
        db.execute(
            "INSERT INTO credentials VALUES (?, 1) "
            "ON CONFLICT (service) DO UPDATE SET version = version + 1",
            (service,),
        )
        (version,) = db.execute(
            "SELECT version FROM credentials WHERE service = ?", (service,)
        ).fetchone()
    return f"rotated the credentials of {service} (now version {version})"


def run_sql(query: str) -> str:
    """Run a read-only SQL query against the services table."""
    connection = sqlite3.connect(f"file:{_state_path()}?mode=ro", uri=True)
    try:
        _connect().close()  # make sure the table exists
        rows = connection.execute(query).fetchmany(20)
    except sqlite3.Error as exc:
        return f"SQL error: {exc}"
    finally:
        connection.close()
    return json.dumps(rows)


def demo_config_dict(model: str = DEMO_MODEL_ID) -> dict[str, Any]:
    """The playground's configuration: the demo tools and who may approve what."""
    return {
        "model": model,
        "tools": [
            "playground.demo:get_status",
            "playground.demo:restart_service",
            "playground.demo:deploy_service",
            "playground.demo:scale_service",
            "playground.demo:rotate_credentials",
            "playground.demo:run_sql",
            "playground.migrations:migrate_tenants",
        ],
        # A sub-agent with read-only tools: "research payments and checkout".
        "agents": {
            "researcher": {
                "description": "looks up a service's status and the services table, read-only",
                "tools": ["playground.demo:get_status", "playground.demo:run_sql"],
            }
        },
        "approval_ttl": "30m",
        "sweep_interval": "5s",
        # A playground killed with -9 carries its long tool on within seconds of a restart.
        "run_lease": "20s",
        "policies": {
            "restart_service": {
                "approvers": ["U0APPROVER1", "U0APPROVER2"],
                "ttl": "15m",
                # Standing grants: "Approve, and allow restarts in this thread for 30 minutes".
                "grant_max": "1h",
            },
            # Quorum: both bo and cy approve (the requester never counts), then it runs once.
            "rotate_credentials": {
                "approvers": ["U0APPROVER1", "U0APPROVER2"],
                "min_approvals": 2,
                "ttl": "30m",
            },
            "migrate_tenants": {"approvers": ["U0APPROVER1", "U0APPROVER2"], "ttl": "30m"},
            "scale_service": {
                "approvers": ["U0APPROVER1", "U0APPROVER2"],
                "ttl": "15m",
                # Rules on arguments: staging scales without asking anyone.
                "rules": [{"when": 'has(args.env) && args.env == "staging"', "approval": "never"}],
                "allow_edit": True,  # Edit, then approve
            },
        },
    }


def register_demo_model() -> None:
    from bot.llm_setup import register_model

    register_model(DemoModel())
