"""The stores: every transaction approval-bot makes, one module per aggregate.

Each store is a class of ``async`` methods over ``self.database`` (a
:class:`~storage.drivers.Database`); each method is a shell around one transaction body, a
plain function over a :class:`~storage.drivers.Tx` that runs a few statements of
:mod:`storage.sql` and returns complete, detached model instances (:mod:`.rows`) or records
(:mod:`storage.records`). :class:`storage.repository.Repository` is all of them over one
database. The stores share nothing but the database and the steps in :mod:`.transitions`
(the run's lock, the resume claim, cancelling a paused run, a decision's outcome) and
:func:`.events.audit`, which every change calls in its own transaction.

By aggregate: runs (:mod:`.runs`, :mod:`.leases`, :mod:`.pauses`, :mod:`.answers`: the
outbox of each run's last message), approvals (:mod:`.approvals`
reads them, :mod:`.decisions`, :mod:`.executions`, :mod:`.checkpoints`, :mod:`.cards`,
:mod:`.votes`, :mod:`.edits`), the other waits (:mod:`.waits`: questions, callbacks,
retries), standing grants (:mod:`.grants`), the approvers' reach (:mod:`.reach`), App Homes
(:mod:`.home`), people's names (:mod:`.people`), Workflow Builder steps (:mod:`.steps`), the
audit trail and Slack event ids (:mod:`.events`), Slack installs (:mod:`.installations`)
and the metrics' live counts (:mod:`.stats`).
"""

from __future__ import annotations

from storage.stores.answers import AnswerStore
from storage.stores.api import ApiStore
from storage.stores.approvals import ApprovalStore
from storage.stores.batches import BatchStore
from storage.stores.cards import CardStore
from storage.stores.checkpoints import CheckpointStore
from storage.stores.decisions import DecisionStore
from storage.stores.delegations import DelegationStore
from storage.stores.edits import EditStore
from storage.stores.events import EventStore
from storage.stores.executions import ExecutionStore
from storage.stores.grants import GrantStore
from storage.stores.home import HomeStore
from storage.stores.installations import InstallationStore
from storage.stores.leases import LeaseStore
from storage.stores.pauses import PauseStore
from storage.stores.people import PeopleStore
from storage.stores.reach import ReachStore
from storage.stores.recoveries import RecoveryStore
from storage.stores.runs import RunStore
from storage.stores.stats import live_counts
from storage.stores.steps import StepStore
from storage.stores.votes import VoteStore
from storage.stores.waits import WaitStore

__all__ = [
    "AnswerStore",
    "ApiStore",
    "ApprovalStore",
    "BatchStore",
    "CardStore",
    "CheckpointStore",
    "DecisionStore",
    "DelegationStore",
    "EditStore",
    "EventStore",
    "ExecutionStore",
    "GrantStore",
    "HomeStore",
    "InstallationStore",
    "LeaseStore",
    "PauseStore",
    "PeopleStore",
    "ReachStore",
    "RecoveryStore",
    "RunStore",
    "StepStore",
    "VoteStore",
    "WaitStore",
    "live_counts",
]
