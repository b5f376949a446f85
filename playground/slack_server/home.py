"""The App Home: ``views.publish``, ``app_home_opened`` and clicks on a Home's buttons.

Each person's Home (per workspace) is the last view the bot published for them; tests read
it with :meth:`HomeMixin.home_of`. :meth:`HomeMixin.open_home` is the person opening the
app's Home tab (Slack sends ``app_home_opened``), :meth:`HomeMixin.click_home` a click on a
button that is on their Home now (a ``block_actions`` from a view: no channel, no response
URL).
"""

from __future__ import annotations

import copy
import json
import secrets

from playground.slack_server.blocks import MAX_VIEW_BLOCKS, _check_blocks
from playground.slack_server.records import (
    VERIFICATION_TOKEN,
    BotReply,
    Json,
    _ApiError,
    _arg,
    _button_elements,
    _random_id,
)


class HomeMixin:
    """``views.publish`` and the Home tab. A mixin of ``SlackServer``."""

    def _init_home(self) -> None:
        self.homes: dict[tuple[str, str], Json] = {}  # (team, user) -> published view

    def home_of(self, user: str) -> Json | None:
        """The Home ``user`` sees now (in their workspace), None if none was published."""
        return self.homes.get((self.workspace_of_user(user).team_id, user))

    def _api_views_publish(self, args: Json) -> Json:
        user = _arg(args, "user_id", "invalid_arguments")
        view = args.get("view")
        if not isinstance(view, dict) or view.get("type") != "home":
            raise _ApiError("invalid_arguments")
        assert self._current_call is not None and self._current_call.team is not None
        team = self._current_call.team
        if self.workspace_of_user(user).team_id != team:
            raise _ApiError("user_not_found")
        previous = self.homes.get((team, user))
        if args.get("hash") and previous and args["hash"] != previous["hash"]:
            raise _ApiError("hash_conflict")
        published = {
            "id": previous["id"] if previous else _random_id("V"),
            "team_id": team,
            "type": "home",
            "blocks": _check_blocks(view.get("blocks", []), MAX_VIEW_BLOCKS),
            "private_metadata": view.get("private_metadata", ""),
            "callback_id": view.get("callback_id", ""),
            "state": {"values": {}},
            "hash": f"{int(self.clock())}.{secrets.token_hex(4)}",
            "app_id": self.app_id,
            "bot_id": self.workspaces[team].bot_id,
        }
        self.homes[(team, user)] = published
        return {"ok": True, "view": copy.deepcopy(published)}

    async def open_home(self, user: str) -> BotReply:
        """``user`` opens the app's Home tab."""
        workspace = self.workspace_of_user(user)
        event: Json = {
            "type": "app_home_opened",
            "user": user,
            "channel": "D" + user[1:],
            "tab": "home",
            "event_ts": self._next_ts(),
        }
        home = self.homes.get((workspace.team_id, user))
        if home is not None:
            event["view"] = copy.deepcopy(home)
        payload = self._event_callback(event, _random_id("Ev"), team_id=workspace.team_id)
        return await self.send_event(payload)

    async def click_home(self, user: str, action_id: str, value: str | None = None) -> BotReply:
        """``user`` clicks a button on their Home (raises if no such button is there)."""
        home = self.home_of(user)
        if home is None:
            raise LookupError(f"{user} has no Home published")
        matches = [
            (block_id, element)
            for block_id, element in _button_elements(home["blocks"])
            if element.get("action_id") == action_id
            and (value is None or element.get("value") == value)
        ]
        if len(matches) != 1:
            shown = [
                (e.get("action_id"), e.get("value")) for _, e in _button_elements(home["blocks"])
            ]
            raise LookupError(f"{len(matches)} buttons {action_id!r} on the Home; it has {shown}")
        block_id, element = matches[0]
        workspace = self.workspace_of_user(user)
        trigger_id = self.issue_trigger_id(user)
        payload: Json = {
            "type": "block_actions",
            "user": self._user_ref(user),
            "api_app_id": self.app_id,
            "token": VERIFICATION_TOKEN,
            "container": {"type": "view", "view_id": home["id"]},
            "trigger_id": trigger_id,
            "team": {"id": workspace.team_id, "domain": workspace.domain},
            "enterprise": None,
            "is_enterprise_install": False,
            "view": copy.deepcopy(home),
            "actions": [
                {
                    "type": "button",
                    "action_id": action_id,
                    "block_id": block_id,
                    "text": copy.deepcopy(element.get("text")),
                    "value": element.get("value"),
                    "action_ts": self._next_ts(),
                }
            ],
        }
        reply = await self._post_form({"payload": json.dumps(payload)})
        reply.sent, reply.trigger_id = payload, trigger_id
        return reply
