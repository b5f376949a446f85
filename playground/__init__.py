"""A local stand-in for Slack: one server for integration tests and the browser playground."""
