"""The checkpoints of long tool calls (``checkpoints``): the last state a running call stored.

A call that ran under an approval (``approvals.status = 'executing'``) may store a JSON state
with ``bot.pauses.checkpoint()``; one row per call, keyed by its approval, holding only the
last state (each save replaces it). A call found ``executing`` whose row is here is resumed
from it by whichever drive holds the run next, instead of being reported "outcome unknown".
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import DateTime, ForeignKey, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from storage.models.base import Base


class Checkpoint(Base):
    __tablename__ = "checkpoints"

    approval_id: Mapped[str] = mapped_column(ForeignKey("approvals.id"), primary_key=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id"), index=True)
    # The state as canonical JSON text (at most 64 KiB: bot.pauses.MAX_CHECKPOINT_BYTES).
    state: Mapped[str] = mapped_column(Text)
    saved_at: Mapped[datetime] = mapped_column(DateTime)
    # How many times it was saved, and how many times the call was resumed from it.
    saves: Mapped[int] = mapped_column(Integer, default=1)
    resumes: Mapped[int] = mapped_column(Integer, default=0)
    # The lease owner of the drive that saved it last (diagnostics: which attempt).
    saved_by: Mapped[str] = mapped_column(String(128), default="")
