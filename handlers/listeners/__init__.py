"""What bolt calls: each module registers its listeners with ``register(app, services)``.

Every listener acknowledges first (Slack wants an answer within 3 seconds) and hands slow work
(the model, a resume, a decision) to tracked background tasks in :mod:`handlers.flows`. The
acknowledgement path reads the database where it must (/approvals lists, a form's permission
check, an edit's schema check), always within ``ack_time_limit``, and never calls a model.

- :mod:`~handlers.listeners.mentions`: ``@approval-bot …`` starts a run (stored, deduplicated).
- :mod:`~handlers.listeners.assistant`: the agent pane (a DM with the app): its prompts, a
  message in it (a run, as a mention's), Slack's Stop.
- :mod:`~handlers.listeners.groups`: user-group changes empty the group cache.
- :mod:`~handlers.listeners.approvals`: a card's Approve, Deny (and its reason form), Show all.
- :mod:`~handlers.listeners.batches`: a batch card's Approve all, Deny all, Review each.
- :mod:`~handlers.listeners.edits`: "Edit, then approve" and its form.
- :mod:`~handlers.listeners.commands`: ``/approvals`` and its pages, grants and history.
- :mod:`~handlers.listeners.questions`: a question's choices, menu and Answer form.
- :mod:`~handlers.listeners.grants`: "Approve, and allow …" menus and Revoke.
- :mod:`~handlers.listeners.holds`: a run's Pause, Resume and Stop (its progress message).
- :mod:`~handlers.listeners.home`: the App Home tab opened.
- :mod:`~handlers.listeners.steps`: the Workflow Builder step "Request approval" run.
- :mod:`~handlers.listeners.uninstall`: the app uninstalled from a workspace (OAuth).

:mod:`~handlers.listeners.interactions` reads what a payload says about itself (where a
click came from, which card or list, how to answer the clicker) the same way for all of them.
"""

from handlers.listeners import (
    approvals,
    assistant,
    batches,
    commands,
    edits,
    grants,
    groups,
    holds,
    home,
    mentions,
    questions,
    recoveries,
    steps,
    uninstall,
)

__all__ = [
    "approvals",
    "assistant",
    "batches",
    "commands",
    "edits",
    "grants",
    "groups",
    "holds",
    "home",
    "mentions",
    "questions",
    "recoveries",
    "steps",
    "uninstall",
]
