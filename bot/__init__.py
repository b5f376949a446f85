"""approval-bot's core: configuration, the approval gate and policy, the agent runner, the CLI.

Nothing here imports slack_bolt: Slack lives in `handlers/`, the database in `storage/`.
"""
