"""Rules on a call's arguments: CEL conditions, checked at start-up, evaluated per call.

A policy's ``[[policies.<tool>.rules]]`` are tried in order; the first whose ``when`` holds
decides the call (its keys override the tool's). Conditions are Google's Common Expression
Language (``cel-python``): no Python ``eval``, no home-made parser. They see three variables:
``args`` (the call's arguments, as stored: what the approver reads), ``requester`` and
``channel`` (Slack ids). Every expression is parsed at start-up and checked to name only
those variables and CEL's own functions, so a typo fails the configuration with its position
instead of failing a call later.

A condition that cannot be evaluated for a call (``args.env`` on a call without ``env``, a
string compared with a number) neither matches nor is skipped: the call fails closed. It
needs a person's approval by the tool's own approvers, and the card says which rule could
not be evaluated and why (see ``Policy.resolve``). Skipping it could let a call that the rule
was written to stop run unasked.

Owns no durable state: the rule that applied is snapshotted on the approval row.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from storage.values import storable

if TYPE_CHECKING:
    import celpy
    import lark

# The variables a condition may name.
VARIABLES = ("args", "requester", "channel")
# CEL's macros (expanded by the evaluator, not functions).
_MACROS = frozenset({"has", "all", "exists", "exists_one", "map", "filter"})


@functools.cache
def _functions() -> frozenset[str]:
    """CEL's functions and type names, as cel-python provides them."""
    import celpy.evaluation

    names = {name for name in celpy.evaluation.base_functions if name[:1].isalpha()}
    return frozenset(names | {"dyn", "null_type", "type"})


@functools.cache
def _environment() -> celpy.Environment:
    """One environment (and so one lark parser) per process. cel-python is imported only
    when a configuration has rules: building its parser takes most of a second, so it is
    loaded from this user's cache when it can be (bot.policy.cel_parser)."""
    import celpy

    from bot.policy.cel_parser import install_cached_parser

    install_cached_parser()

    # cel-python raises the interpreter's recursion limit as it builds an environment; the
    # process's limit is not a library's to change (conditions are a line or two of config).
    limit = sys.getrecursionlimit()
    try:
        return celpy.Environment()
    finally:
        sys.setrecursionlimit(limit)


class RuleSyntaxError(ValueError):
    """An expression that is not valid CEL, or names something a condition cannot see."""

    def __init__(self, message: str, *, line: int | None, column: int | None) -> None:
        where = f"line {line}, column {column}: " if line is not None else ""
        super().__init__(f"{where}{message}")
        self.line = line
        self.column = column


@dataclass(frozen=True)
class Condition:
    """A checked CEL expression, ready to evaluate (the program is built once)."""

    source: str
    program: Any = field(compare=False, repr=False)

    def holds(self, arguments: dict[str, Any], *, requester: str, channel: str) -> bool:
        """Whether the condition is true for this call; raises RuleEvaluationError."""
        return self.holds_in(activation_of(arguments, requester=requester, channel=channel))

    def holds_in(self, activation: dict[str, Any]) -> bool:
        """Whether the condition is true with these variables; raises RuleEvaluationError."""
        import celpy

        try:
            value = self.program.evaluate(activation)
        except Exception as exc:  # CELEvalError, and whatever a CEL function let through
            raise RuleEvaluationError(_evaluation_reason(exc)) from exc
        if isinstance(value, celpy.evaluation.CELEvalError):
            raise RuleEvaluationError(_evaluation_reason(value))
        if not isinstance(value, celpy.celtypes.BoolType):
            raise RuleEvaluationError(
                f"the condition gave {type(value).__name__.removesuffix('Type').lower()}, "
                "not true or false"
            )
        return bool(value)


def activation_of(arguments: dict[str, Any], *, requester: str, channel: str) -> dict[str, Any]:
    """A call's variables as CEL values; raises RuleEvaluationError (arguments too deep…)."""
    import celpy

    try:
        return {
            "args": celpy.json_to_cel(storable(dict(arguments))),
            "requester": celpy.celtypes.StringType(requester or ""),
            "channel": celpy.celtypes.StringType(channel or ""),
        }
    except Exception as exc:
        raise RuleEvaluationError(_evaluation_reason(exc)) from exc


class RuleEvaluationError(Exception):
    """A condition that could not be evaluated for one call (its reason is shown)."""


def compile_condition(source: str) -> Condition:
    """Parse and check ``source``; raises RuleSyntaxError with the line and column."""
    import celpy

    if not source.strip():
        raise RuleSyntaxError("the condition is empty", line=None, column=None)
    environment = _environment()
    try:
        tree = environment.compile(source)
    except celpy.CELParseError as exc:
        raise RuleSyntaxError(
            _parse_reason(exc), line=exc.line or 1, column=exc.column or 1
        ) from None
    _check_names(tree)
    _check_patterns(tree)
    return Condition(source=source, program=environment.program(tree))


@dataclass(frozen=True)
class Rule:
    """One ``[[policies.<tool>.rules]]`` entry; None for a key the rule leaves to the tool."""

    label: str  # "policies.refund.rules[0]": how the card, the audit and the CLI name it
    when: Condition
    approval: str | None = None
    approvers: list[str] | None = None
    min_approvals: int | None = None
    ttl: timedelta | None = None
    on_expiry: str | None = None
    message: str | None = None

    def overrides(self) -> dict[str, Any]:
        keys = ("approval", "approvers", "min_approvals", "ttl", "on_expiry", "message")
        return {k: getattr(self, k) for k in keys if getattr(self, k) is not None}


@dataclass(frozen=True)
class Choice:
    """Which rule decides a call: ``rule`` None means the tool's defaults; ``error`` says
    why ``rule``'s condition could not be evaluated (the call then fails closed)."""

    rule: Rule | None
    error: str | None = None


def choose(
    rules: Sequence[Rule], arguments: dict[str, Any], *, requester: str, channel: str
) -> Choice:
    """The first rule whose condition holds, or the first that cannot be evaluated."""
    if not rules:
        return Choice(None)
    # Converted once for all the rules: the model picks the arguments' size, and the rules
    # run on the event loop.
    try:
        activation = activation_of(arguments, requester=requester, channel=channel)
    except RuleEvaluationError as exc:
        return Choice(rules[0], error=str(exc))
    for rule in rules:
        try:
            if rule.when.holds_in(activation):
                return Choice(rule)
        except RuleEvaluationError as exc:
            return Choice(rule, error=str(exc))
    return Choice(None)


# -- checking and explaining -----------------------------------------------------------


def _check_names(tree: lark.Tree[Any]) -> None:
    """Only ``args``, ``requester``, ``channel``, the variables macros bind and CEL's own
    functions: anything else is a typo that would only fail when a call arrives."""
    bound = {name for name, _ in _macro_variables(tree)}
    for node in tree.iter_subtrees_topdown():  # type: ignore[no-untyped-call]  # lark is untyped
        if node.data == "ident":
            token = node.children[0]
            name = str(token)
            if name not in VARIABLES and name not in bound and name not in _functions():
                known = ", ".join(VARIABLES)
                raise RuleSyntaxError(
                    f"unknown name {name!r} (a condition sees {known})",
                    line=token.line,
                    column=token.column,
                )
        elif node.data in ("ident_arg", "member_dot_arg"):
            token = node.children[0 if node.data == "ident_arg" else 1]
            name = str(token)
            if name not in _functions() and name not in _MACROS:
                raise RuleSyntaxError(
                    f"unknown function {name!r}", line=token.line, column=token.column
                )
        elif node.data in ("dot_ident", "dot_ident_arg", "member_object"):
            line, column = _position(node)
            raise RuleSyntaxError(
                "qualified names and message literals are not available in conditions",
                line=line,
                column=column,
            )


def _check_patterns(tree: lark.Tree[Any]) -> None:
    """A ``matches`` pattern written in the condition is compiled now (RE2, as CEL runs it):
    a broken one would make every call fail closed, not fail the configuration."""
    import lark
    import re2

    for node in tree.iter_subtrees():
        if node.data == "member_dot_arg" and str(node.children[1]) == "matches":
            exprs, index = node.children[2:3], 0  # text.matches(pattern)
        elif node.data == "ident_arg" and str(node.children[0]) == "matches":
            exprs, index = node.children[1:2], 1  # matches(text, pattern)
        else:
            continue
        if not exprs or not isinstance(exprs[0], lark.Tree) or len(exprs[0].children) <= index:
            continue
        pattern = exprs[0].children[index]
        if not isinstance(pattern, lark.Tree):
            continue
        chain = list(pattern.iter_subtrees())
        if any(len(t.children) != 1 for t in chain) or chain[0].data != "literal":
            continue  # a pattern built from the arguments is checked when it runs
        value = _environment().program(pattern).evaluate({})
        if not isinstance(value, str):
            continue
        literals = chain[:1]
        options = re2.Options()
        options.log_errors = False
        try:
            re2.compile(value, options)
        except re2.error as exc:
            reason = exc.args[0] if exc.args else ""
            if isinstance(reason, bytes):
                reason = reason.decode("utf-8", "replace")
            token: Any = literals[0].children[0]
            raise RuleSyntaxError(
                f"not a valid regular expression ({reason})",
                line=token.line,
                column=token.column,
            ) from None


def _macro_variables(tree: lark.Tree[Any]) -> Iterator[tuple[str, lark.Tree[Any]]]:
    """The variables ``list.exists(x, …)`` and its kin bind (their first argument)."""
    import lark

    for node in tree.iter_subtrees():
        if node.data != "member_dot_arg" or str(node.children[1]) not in _MACROS:
            continue
        if len(node.children) < 3 or not isinstance(node.children[2], lark.Tree):
            continue
        first = node.children[2].children[0]
        idents = [t for t in first.iter_subtrees() if t.data == "ident"]
        if len(idents) == 1:
            yield str(idents[0].children[0]), node


def _position(node: lark.Tree[Any]) -> tuple[int | None, int | None]:
    meta = getattr(node, "meta", None)
    if meta is None or getattr(meta, "empty", True):
        return None, None
    return meta.line, meta.column


def _parse_reason(exc: celpy.CELParseError) -> str:
    cause = exc.__context__
    token = getattr(cause, "token", None)
    if token is not None:
        if token.type == "$END":
            return "not valid CEL: the expression ends too early"
        return f"not valid CEL: unexpected {str(token)!r}"
    char = getattr(cause, "char", None)
    if char is not None:
        return f"not valid CEL: unexpected character {char!r}"
    return "not valid CEL"


def _evaluation_reason(exc: Any) -> str:
    args = getattr(exc, "args", ())
    text = str(args[0]) if args else str(exc)
    if text.startswith("no such member in mapping"):
        return text.replace("no such member in mapping", "the arguments have no field")
    if text.startswith("found no matching overload"):
        return "the condition compares or combines values of different types"
    return text.splitlines()[0][:200] if text else type(exc).__name__
