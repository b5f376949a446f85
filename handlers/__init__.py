"""Slack: listeners for mentions, buttons, forms and /approvals, and every card in Block Kit.

Everything that speaks Slack lives here; handlers call into `bot/` for decisions and runs.
Five packages, each importing only those below it (no cycles, deferred imports included):

- ``blocks``: pure Block Kit from database rows (cards, lists, forms, sentences); no I/O.
- ``slack``: Slack's Web API: clients and tokens, user groups, names, and everything the bot
  posts (the publisher, the approvers' DM copies, the App Home).
- ``services``: the container every listener and flow receives (built in ``app``).
- ``flows``: what follows a request or a timer: settle a click, resume a run, refresh a list,
  sweep.
- ``listeners``: what bolt calls; each module registers its own with ``register(app,
  services)``. Beside them, ``middleware`` (imports ``blocks`` only): the checks and
  instrumentation in front of the listeners.
- ``app``: the one place that wires: ``build_services``, ``build_app``, ``build_web_app``.

The data path, top to bottom: a mention (``listeners.mentions``) is stored with its event id
(dedupe) and driven (``flows.runs.drive_request`` -> ``bot.engine``); a gated call pauses,
its row is persisted by the engine and its card posted (``slack.publish``). A click
(``listeners.approvals``) is acknowledged and settled (``flows.settle``): where it came from
and who clicked (``flows.clicks``, groups confirmed), the one conditional UPDATE that claims
it (``Runner.decide``), the card edited in place, then the run resumed and answered in its
thread (``flows.runs.resume_and_publish`` -> ``slack.publish``).
"""
