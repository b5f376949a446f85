"""The playground's people: who a visitor can be on the page, and what Slack says of them.

A requester, two approvers and an outsider, so that every refusal and every quorum of the demo
can be tried; the Slack stand-in answers ``users.info`` with these names.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Person:
    id: str
    name: str
    role: str
    full_name: str = ""  # what users.info answers as real_name


PEOPLE = (
    Person("U0REQUESTER", "ana", "requester", "Ana Ruiz"),
    Person("U0APPROVER1", "bo", "approver", "Bo Lee"),
    Person("U0APPROVER2", "cy", "approver", "Cy Park"),
    Person("U0OUTSIDER", "dee", "outsider", "Dee Shah"),
)
