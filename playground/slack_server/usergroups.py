"""User groups: ``usergroups.users.list`` and the ``subteam_*`` events Slack sends.

An admin changing a group's members is driven from here too (``change_usergroup``).
"""

from __future__ import annotations

from playground.slack_server.records import BotReply, Json, _ApiError, _arg, _random_id


class UsergroupsMixin:
    """``usergroups.users.list`` and the user group events.

    A mixin of ``SlackServer``, whose ``__init__`` sets the state it uses.
    """

    def _api_usergroups_users_list(self, args: Json) -> Json:
        group = _arg(args, "usergroup", "no_such_subteam")
        if group not in self.usergroups:
            raise _ApiError("no_such_subteam")
        return {"ok": True, "users": list(self.usergroups[group])}

    async def change_usergroup(
        self, group: str, members: list[str], *, notify: bool = True
    ) -> BotReply | None:
        """An admin sets a user group's members. With ``notify`` Slack tells the bot, as it
        does apps with ``usergroups:read``: a ``subteam_members_changed`` event (a delta).
        Without, the change is as seen by a replica the event went to another of."""
        before = set(self.usergroups.get(group, []))
        self.usergroups[group] = list(members)
        if not notify:
            return None
        added, removed = sorted(set(members) - before), sorted(before - set(members))
        return await self.send_event(self.members_changed_payload(group, added, removed))

    def members_changed_payload(self, group: str, added: list[str], removed: list[str]) -> Json:
        """The ``subteam_members_changed`` event_callback, as Slack sends it."""
        now = int(self.clock())
        event = {
            "type": "subteam_members_changed",
            "subteam_id": group,
            "team_id": self.team_id,
            "date_previous_update": now - 60,
            "date_update": now,
            "added_users": added,
            "added_users_count": str(len(added)),
            "removed_users": removed,
            "removed_users_count": str(len(removed)),
            "event_ts": self._next_ts(),
        }
        return self._event_callback(event, _random_id("Ev"))

    async def usergroup_updated(self, group: str) -> BotReply:
        """Slack's ``subteam_updated`` event: the group as it is now (``users`` included)."""
        return await self.send_event(self.group_updated_payload(group))

    def group_updated_payload(self, group: str) -> Json:
        """The ``subteam_updated`` event_callback, as Slack sends it."""
        users = list(self.usergroups.get(group, []))
        now = int(self.clock())
        subteam = {
            "id": group,
            "team_id": self.team_id,
            "is_usergroup": True,
            "name": group,
            "handle": group.lower(),
            "is_external": False,
            "date_create": now - 86_400,
            "date_update": now,
            "date_delete": 0,
            "created_by": "U0ADMIN",
            "updated_by": "U0ADMIN",
            "deleted_by": None,
            "prefs": {"channels": [], "groups": []},
            "users": users,
            "user_count": str(len(users)),
        }
        event = {"type": "subteam_updated", "subteam": subteam, "event_ts": self._next_ts()}
        return self._event_callback(event, _random_id("Ev"))
