"""``views.*`` and trigger ids: modals opened, updated, submitted, with Slack's trigger rules.

A trigger_id is issued with each click or command, lives 3 seconds and opens one modal.
"""

from __future__ import annotations

import copy
import secrets
from typing import Any

from playground.slack_server.blocks import MAX_VIEW_BLOCKS, _check_blocks
from playground.slack_server.records import Json, OpenView, _ApiError, _arg, _random_id, _TriggerId


class ViewsMixin:
    """The ``views.*`` Web API methods, trigger ids and view submissions' acks.

    A mixin of ``SlackServer``, whose ``__init__`` sets the state it uses.
    """

    def _api_views_open(self, args: Json) -> Json:
        trigger = self._exchange_trigger(_arg(args, "trigger_id", "invalid_trigger_id"))
        view_id = _random_id("V")
        stored = self._full_view(view_id, self._view_arg(args))
        self.views[view_id] = OpenView(view_id, trigger.user, stored, trigger.value, self.clock())
        return {"ok": True, "view": copy.deepcopy(stored)}

    def _api_views_update(self, args: Json) -> Json:
        opened = self._find_view(args)
        if args.get("hash") and args["hash"] != opened.view["hash"]:
            raise _ApiError("hash_conflict")
        opened.view = self._full_view(opened.id, self._view_arg(args), previous=opened.view)
        return {"ok": True, "view": copy.deepcopy(opened.view)}

    # -- views and trigger ids ------------------------------------------------------------------

    def issue_trigger_id(self, user: str, *, age: float = 0.0) -> str:
        """A trigger_id for ``user``, as sent with clicks/commands; ``age`` backdates it."""
        issued_at = self.clock() - age
        value = f"{int(issued_at * 1000)}.{next(self._counter):04d}.{secrets.token_hex(16)}"
        self._triggers[value] = _TriggerId(value=value, user=user, issued_at=issued_at)
        return value

    def _exchange_trigger(self, value: str) -> _TriggerId:
        """Slack's rules: issued by us, used once, within 3 seconds."""
        trigger = self._triggers.get(value)
        if trigger is None:
            raise _ApiError("invalid_trigger_id")
        if trigger.used:
            raise _ApiError("exchanged_trigger_id")
        if self.clock() - trigger.issued_at > self.trigger_ttl:
            raise _ApiError("expired_trigger_id")
        trigger.used = True
        return trigger

    @staticmethod
    def _view_arg(args: Json) -> Json:
        view = args.get("view")
        if not isinstance(view, dict) or view.get("type") != "modal" or "title" not in view:
            raise _ApiError("invalid_arguments")
        return view

    def _find_view(self, args: Json) -> OpenView:
        if args.get("view_id"):
            opened = self.views.get(str(args["view_id"]))
        else:
            external = args.get("external_id")
            found = (
                v for v in self.views.values() if external and v.view["external_id"] == external
            )
            opened = next(found, None)
        if opened is None or opened.closed:
            raise _ApiError("not_found")
        return opened

    def _full_view(self, view_id: str, view: Json, previous: Json | None = None) -> Json:
        """The view object Slack returns and sends back in view_submission payloads."""
        return {
            "id": view_id,
            "team_id": self.team_id,
            "type": "modal",
            "blocks": _check_blocks(view.get("blocks", []), MAX_VIEW_BLOCKS),
            "private_metadata": view.get("private_metadata", ""),
            "callback_id": view.get("callback_id", ""),
            "state": {"values": {}},
            "hash": f"{int(self.clock())}.{secrets.token_hex(4)}",
            "title": copy.deepcopy(view["title"]),
            "clear_on_close": bool(view.get("clear_on_close", False)),
            "notify_on_close": bool(view.get("notify_on_close", False)),
            "close": copy.deepcopy(view.get("close")),
            "submit": copy.deepcopy(view.get("submit")),
            "previous_view_id": previous["previous_view_id"] if previous else None,
            "root_view_id": previous["root_view_id"] if previous else view_id,
            "app_id": self.app_id,
            "external_id": view.get("external_id", ""),
            "app_installed_team_id": self.team_id,
            "bot_id": self.bot_id,
        }

    def _apply_view_ack(self, opened: OpenView, ack: Any) -> None:
        """What Slack does with the answer to a view_submission."""
        action = ack.get("response_action") if isinstance(ack, dict) else None
        if action == "errors":
            return
        if action == "update" and isinstance(ack.get("view"), dict):
            opened.view = self._full_view(opened.id, ack["view"], previous=opened.view)
            return
        if action == "push" and isinstance(ack.get("view"), dict):
            pushed = _random_id("V")
            view = self._full_view(pushed, ack["view"])
            self.views[pushed] = OpenView(pushed, opened.user, view, "", self.clock())
            return
        opened.closed = True  # empty ack or "clear": the modal closes
