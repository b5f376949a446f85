"""``users.info``: the user objects Slack returns for people and for the bot."""

from __future__ import annotations

from playground.slack_server.records import Json, _ApiError, _arg


class UsersMixin:
    """The ``users.*`` Web API methods.

    A mixin of ``SlackServer``, whose ``__init__`` sets the state it uses.
    """

    def _api_users_info(self, args: Json) -> Json:
        user = _arg(args, "user", "user_not_found")
        if user != self.bot_user_id and user not in self.users:
            raise _ApiError("user_not_found")
        return {"ok": True, "user": self._user_object(user)}

    def _user_object(self, user: str) -> Json:
        is_bot = user == self.bot_user_id
        name = self.bot_name if is_bot else self.user_name(user)
        # A person's full name, where the server was given one; else the handle.
        real_name = name if is_bot else self.real_names.get(user, name)
        return {
            "id": user,
            "team_id": self.team_id,
            "name": name,
            "deleted": False,
            "real_name": real_name,
            "tz": "Etc/UTC",
            "is_admin": False,
            "is_owner": False,
            "is_bot": is_bot,
            "is_app_user": False,
            "profile": {
                "real_name": real_name,
                "display_name": name,
                "real_name_normalized": real_name,
                "display_name_normalized": name,
                "team": self.team_id,
                **({"bot_id": self.bot_id} if is_bot else {}),
            },
        }
