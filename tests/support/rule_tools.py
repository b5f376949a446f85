"""Tools whose calls rules on arguments decide (tests/test_rules*.py); each real execution is
recorded in ``ops_tools.EXECUTED``, which every test starts empty."""

from __future__ import annotations

from tests.support.ops_tools import EXECUTED


def scale_service(service: str, env: str, replicas: int) -> str:
    """Scale a service in an environment to a number of replicas."""
    EXECUTED.append(("scale_service", {"service": service, "env": env, "replicas": replicas}))
    return f"scaled {service} in {env} to {replicas}"


def refund(order: str, amount_cents: int) -> str:
    """Refund an order."""
    EXECUTED.append(("refund", {"order": order, "amount_cents": amount_cents}))
    return f"refunded {amount_cents} cents on {order}"
