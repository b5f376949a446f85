"""Operating the bot: logs, metrics, failpoints, background tasks and the HTTP endpoints
beside Slack's (``/metrics``, ``/readyz``, ``/livez``, ``/callbacks/…``), and the timer for
retries that come due.

Every layer above reports here: log context (:mod:`bot.ops.logs`), metric hooks that cost
nothing in a process that serves no metrics (:mod:`bot.ops.metric_hooks`), named crash windows
for the fault suite (:mod:`bot.ops.failpoints`), and a database outage logged as one line
when it starts and one when it ends (:mod:`bot.ops.outage`, shared by every loop). This
package knows nothing of the engine above it: the callback route and the retry timer are
handed what to call. The face names the light modules only; the ones that load aiohttp or
prometheus_client (``metrics``, ``endpoints``, ``callback_route``, ``retry_timer``,
``log_output``) are imported by their path, by the process that serves them.
"""

from bot.ops import logs, metric_hooks
from bot.ops.background import BackgroundTasks
from bot.ops.failpoints import failpoint

__all__ = ["BackgroundTasks", "failpoint", "logs", "metric_hooks"]
