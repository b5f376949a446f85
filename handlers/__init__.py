"""Slack: listeners for mentions, buttons, the deny-reason modal and /approvals, and Block Kit.

Everything that speaks Slack lives here; handlers call into `bot/` for decisions and runs.
"""
