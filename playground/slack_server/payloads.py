"""The payloads Slack sends the bot, built from this server's own state.

Events API callbacks (``app_mention``), ``block_actions`` for a button actually on a
message, ``view_submission`` for an open modal and slash command forms; the public
``*_payload``/``command_fields`` builders let tests send them as they wish.
"""

from __future__ import annotations

import copy
import secrets

from playground.slack_server.records import VERIFICATION_TOKEN, Json, Message, OpenView, _random_id


def _find_button(
    message: Message, action_id: str, value: str | None, *, as_seen: bool = False
) -> tuple[str, Json]:
    """The one button with that action_id (and value) actually on the message; ``as_seen``:
    or on an earlier version of it (the newest such), which a stale screen still shows."""

    def matching(buttons: list[tuple[str, Json]]) -> list[tuple[str, Json]]:
        return [
            (block_id, element)
            for block_id, element in buttons
            if element.get("action_id") == action_id
            and (value is None or element.get("value") == value)
        ]

    matches = matching(list(message.buttons()))
    if not matches and as_seen:
        former = matching([(str(b), e) for b, e in reversed(message.former_buttons)])
        matches = former[:1]
    if not matches:
        shown = [(e.get("action_id"), e.get("value")) for _, e in message.buttons()]
        raise LookupError(f"no button {action_id!r} (value={value!r}) on message; it has {shown}")
    if len(matches) > 1:
        raise LookupError(f"{len(matches)} buttons {action_id!r} on the message: pass value=")
    block_id, element = matches[0]
    if element.get("type") != "button":
        raise ValueError(f"{action_id!r} is a {element.get('type')}; only buttons are clickable")
    return block_id, element


def _button_action(block_id: str, element: Json, action_ts: str) -> Json:
    """One entry of block_actions' ``actions``, shaped like Slack sends it for a button."""
    action: Json = {
        "action_id": element["action_id"],
        "block_id": block_id,
        "text": copy.deepcopy(element.get("text", {"type": "plain_text", "text": ""})),
        "type": "button",
        "action_ts": action_ts,
    }
    if "value" in element:
        action["value"] = element["value"]
    if "style" in element:
        action["style"] = element["style"]
    return action


def _find_select(message: Message, action_id: str) -> tuple[str, Json]:
    """The one static_select menu with that action_id actually on the message."""
    matches = [
        (block_id, element)
        for block_id, element in message.buttons()
        if element.get("action_id") == action_id and element.get("type") == "static_select"
    ]
    if len(matches) != 1:
        shown = [(e.get("action_id"), e.get("type")) for _, e in message.buttons()]
        raise LookupError(f"no single menu {action_id!r} on the message; it has {shown}")
    return matches[0]


def _select_action(block_id: str, element: Json, option: Json, action_ts: str) -> Json:
    """One entry of block_actions' ``actions`` for an option picked in a static_select."""
    action: Json = {
        "type": "static_select",
        "action_id": element["action_id"],
        "block_id": block_id,
        "selected_option": copy.deepcopy(option),
        "action_ts": action_ts,
    }
    if "placeholder" in element:
        action["placeholder"] = copy.deepcopy(element["placeholder"])
    return action


class PayloadsMixin:
    """Payloads Slack sends, built from this server's state.

    A mixin of ``SlackServer``, whose ``__init__`` sets the state it uses.
    """

    def _user_ref(self, user: str) -> Json:
        name = self.user_name(user)
        team_id = self.workspace_of_user(user).team_id
        return {"id": user, "username": name, "name": name, "team_id": team_id}

    def _channel_ref(self, channel: str) -> Json:
        return {"id": channel, "name": self.channels.get(channel, channel.lower())}

    def _event_callback(self, event: Json, event_id: str, *, team_id: str | None = None) -> Json:
        """The Events API envelope around an event, as in fixtures/app_mention.json.

        ``team_id``: the workspace it happened in (else the channel's, else the first)."""
        channel = event.get("channel")
        workspace = (
            self.workspaces[team_id]
            if team_id is not None
            else self.workspace_of_channel(channel if isinstance(channel, str) else "")
        )
        return {
            "token": VERIFICATION_TOKEN,
            "team_id": workspace.team_id,
            "context_team_id": workspace.team_id,
            "context_enterprise_id": None,
            "api_app_id": self.app_id,
            "event": event,
            "type": "event_callback",
            "event_id": event_id,
            "event_time": int(self.clock()),
            "authorizations": [
                {
                    "enterprise_id": None,
                    "team_id": workspace.team_id,
                    "user_id": workspace.bot_user_id,
                    "is_bot": True,
                    "is_enterprise_install": False,
                }
            ],
            "is_ext_shared_channel": False,
            "event_context": "4-" + secrets.token_urlsafe(24),
        }

    def _mention_payload(
        self, user: str, channel: str, text: str, thread_ts: str | None, event_id: str | None
    ) -> tuple[Message, Json]:
        """Post the user's message, then build its app_mention event_callback."""
        workspace = self.workspace_of_channel(channel)
        mention = f"<@{workspace.bot_user_id}>"
        message = self.post_user_message(
            user, channel, text if mention in text else f"{mention} {text}", thread_ts=thread_ts
        )
        event: Json = {
            "client_msg_id": message.client_msg_id,
            "type": "app_mention",
            "text": message.text,
            "user": user,
            "ts": message.ts,
            "blocks": copy.deepcopy(message.blocks),
            "team": workspace.team_id,
        }
        if message.thread_ts:
            event.update(thread_ts=message.thread_ts, parent_user_id=message.parent_user_id)
        event.update(channel=channel, event_ts=message.ts)
        return message, self._event_callback(event, event_id or _random_id("Ev"))

    def _container(self, message: Message) -> Json:
        container: Json = {
            "type": "message",
            "message_ts": message.ts,
            "channel_id": message.channel,
            "is_ephemeral": message.is_ephemeral,
        }
        if message.thread_ts:
            container["thread_ts"] = message.thread_ts
        return container

    def _block_actions_payload(
        self, user: str, message: Message, action: Json, trigger_id: str, response_url: str
    ) -> Json:
        """block_actions as in fixtures/block_actions.json (no ``message`` when ephemeral)."""
        workspace = self.workspace_of_channel(message.channel)
        payload: Json = {
            "type": "block_actions",
            "user": self._user_ref(user),
            "api_app_id": self.app_id,
            "token": VERIFICATION_TOKEN,
            "container": self._container(message),
            "trigger_id": trigger_id,
            "team": {"id": workspace.team_id, "domain": workspace.domain},
            "enterprise": None,
            "is_enterprise_install": False,
            "channel": self._channel_ref(message.channel),
        }
        if not message.is_ephemeral:
            payload["message"] = message.to_api()
        payload.update(state={"values": {}}, response_url=response_url, actions=[action])
        return payload

    def _visible_message(self, user: str, message: Message) -> Message:
        """The message as it is now; a deleted or someone else's ephemeral can't be clicked."""
        current = self.message(message.channel, message.ts)
        if current is None:
            raise LookupError(f"message {message.channel}/{message.ts} no longer exists")
        if current.ephemeral_to not in (None, user):
            raise PermissionError(f"{user} cannot see {current.ephemeral_to}'s ephemeral message")
        return current

    def _prepare_click(
        self, user: str, message: Message, action_id: str, value: str | None, as_seen: bool = False
    ) -> tuple[Json, str, str]:
        current = self._visible_message(user, message)
        block_id, element = _find_button(current, action_id, value, as_seen=as_seen)
        return self._prepare_action(user, current, block_id, element)

    def _prepare_action(
        self, user: str, message: Message, block_id: str, element: Json
    ) -> tuple[Json, str, str]:
        """(payload, trigger_id, response_url) for a click on ``element``."""
        trigger_id = self.issue_trigger_id(user)
        response_url = self.issue_response_url(user, message.channel, source=message)
        action = _button_action(block_id, element, self._next_ts())
        payload = self._block_actions_payload(user, message, action, trigger_id, response_url)
        return payload, trigger_id, response_url

    def _prepare_select(
        self, user: str, message: Message, action_id: str, option_text: str
    ) -> tuple[Json, str, str]:
        """(payload, trigger_id, response_url) for picking the option shown as ``option_text``."""
        current = self._visible_message(user, message)
        block_id, element = _find_select(current, action_id)
        options = [o for o in element.get("options", []) if o["text"]["text"] == option_text]
        if len(options) != 1:
            shown = [o["text"]["text"] for o in element.get("options", [])]
            raise LookupError(f"no single option {option_text!r} in {action_id!r}: {shown}")
        trigger_id = self.issue_trigger_id(user)
        response_url = self.issue_response_url(user, current.channel, source=current)
        action = _select_action(block_id, element, options[0], self._next_ts())
        payload = self._block_actions_payload(user, current, action, trigger_id, response_url)
        return payload, trigger_id, response_url

    def _prepare_raw_click(
        self, user: str, channel: str, action_id: str, value: str, options: Json
    ) -> tuple[Json, str, str]:
        """A click that needs no real button: the stored message if ``message_ts`` names one."""
        message = self.message(channel, options["message_ts"]) if options["message_ts"] else None
        if message is None:
            message = Message(
                channel=channel,
                ts=options["message_ts"] or self._next_ts(),
                user=self.bot_user_id,
                thread_ts=options["thread_ts"],
                bot_id=self.bot_id,
                app_id=self.app_id,
                team=self.team_id,
                ephemeral_to=user if options["is_ephemeral"] else None,
            )
        element = {
            "type": "button",
            "action_id": action_id,
            "value": value,
            "text": {"type": "plain_text", "text": action_id, "emoji": True},
        }
        return self._prepare_action(user, message, options["block_id"], element)

    def _prepare_submission(
        self, user: str, view_id: str, values: dict[str, dict[str, Json]]
    ) -> tuple[OpenView, Json]:
        """view_submission for a modal open for ``user``, values keyed like Slack's state."""
        opened = self.views.get(view_id)
        if opened is None or opened.closed:
            raise LookupError(f"no open view {view_id}")
        if opened.user != user:
            raise PermissionError(f"view {view_id} was opened for {opened.user}, not {user}")
        input_ids = {b.get("block_id") for b in opened.view["blocks"] if b.get("type") == "input"}
        unknown = set(values) - input_ids
        if unknown:
            raise LookupError(f"view {view_id} has no input blocks {sorted(unknown)}")
        view = copy.deepcopy(opened.view)
        view["state"] = {"values": copy.deepcopy(values)}
        workspace = self.workspace_of_user(user)
        payload: Json = {
            "type": "view_submission",
            "team": {"id": workspace.team_id, "domain": workspace.domain},
            "user": self._user_ref(user),
            "api_app_id": self.app_id,
            "token": VERIFICATION_TOKEN,
            "trigger_id": self.issue_trigger_id(user),
            "view": view,
            "response_urls": [],
            "is_enterprise_install": False,
            "enterprise": None,
        }
        return opened, payload

    def _slash_fields(self, user: str, channel: str, command: str, text: str) -> dict[str, str]:
        """The slash command form, field for field as in fixtures/slash_command.txt."""
        workspace = self.workspace_of_channel(channel)
        return {
            "token": VERIFICATION_TOKEN,
            "team_id": workspace.team_id,
            "team_domain": workspace.domain,
            "channel_id": channel,
            "channel_name": self._channel_ref(channel)["name"],
            "user_id": user,
            "user_name": self.user_name(user),
            "command": command,
            "text": text,
            "api_app_id": self.app_id,
            "is_enterprise_install": "false",
            "response_url": self.issue_response_url(user, channel),
            "trigger_id": self.issue_trigger_id(user),
        }

    def mention_payload(
        self, user: str, channel: str, text: str, *, thread_ts: str | None = None
    ) -> Json:
        """The app_mention event_callback a mention would send (the message is posted)."""
        return self._mention_payload(user, channel, text, thread_ts, None)[1]

    def click_payload(self, user: str, channel: str, action_id: str, value: str) -> Json:
        """A block_actions payload for a click on a button with ``action_id`` and ``value``."""
        options = {
            "block_id": "actions",
            "message_ts": None,
            "thread_ts": None,
            "is_ephemeral": False,
        }
        return self._prepare_raw_click(user, channel, action_id, value, options)[0]

    def submission_payload(
        self, user: str, view_id: str, values: dict[str, dict[str, Json]]
    ) -> Json:
        """The view_submission payload for ``user`` submitting an open modal."""
        return self._prepare_submission(user, view_id, values)[1]

    def command_fields(self, user: str, channel: str, text: str = "") -> dict[str, str]:
        """The form fields of ``/approvals text``."""
        return self._slash_fields(user, channel, "/approvals", text)
