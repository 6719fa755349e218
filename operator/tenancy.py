"""Who may use a Queue and whether it takes work: ``spec.namespaceSelector`` and ``spec.state``. Pure: no I/O.

A Queue's ``namespaceSelector`` is a ``metav1.LabelSelector`` (``matchLabels``, ``matchExpressions``), read as the
API server reads every label selector. Without one a Queue admits every namespace: the chart's ``default`` Queue
and every Queue stored before the field existed keep taking the work they took, and the one-label quickstart
(``stowage.io/queue`` on a pod or a namespace) needs no second object. ``{}`` matches every namespace too, as
every Kubernetes selector does; a platform team that hands out queues gives each one a selector.

``spec.state``: ``Open`` (default); ``Closed`` refuses new work at admission and leaves what it admitted alone;
``Draining`` admits new work but the dispatcher releases none of it (hold reason ``draining``), so running work
finishes and nothing new starts.

Both are checked when work is admitted (a pod, a Stowage Job, a workload's pod template), never again: a selector
or a state changed later strands nothing that runs or waits (the dispatcher reads only ``Draining``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from stowage.operator import crd

from stowage.errors import InvalidInput
from stowage.resources import shown

__all__ = ["admission_problem", "matches", "queue_state", "selector_problems", "show_selector"]

# A label key: an optional DNS-subdomain prefix and "/", then a name of at most 63 characters; a value: empty or
# such a name (the API server's own rules for labels).
_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_PREFIX = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_KEY_ALLOWED = ("a label key: a name of at most 63 letters, digits, '-', '_', '.' (starting and ending with a letter "
                "or digit), with an optional DNS prefix and '/' (e.g. team, example.com/team)")
_VALUE_ALLOWED = "a label value: empty, or at most 63 letters, digits, '-', '_', '.' starting and ending with one"
_SELECTOR_ALLOWED = "a label selector: an object with matchLabels (a map) and/or matchExpressions (a list)"


def _is_key(key: Any) -> bool:
    if not isinstance(key, str):
        return False
    prefix, _, name = key.rpartition("/")
    if prefix and (len(prefix) > 253 or not _PREFIX.fullmatch(prefix)):
        return False
    return len(name) <= 63 and _NAME.fullmatch(name) is not None


def _is_value(value: Any) -> bool:
    return isinstance(value, str) and (value == "" or (len(value) <= 63 and _NAME.fullmatch(value) is not None))


def _expression_problems(expr: Any, field: str) -> list[InvalidInput]:
    if not isinstance(expr, Mapping):
        return [InvalidInput(field, shown(expr), "an object with key, operator and values")]
    problems = [InvalidInput(f"{field}.{k}", shown(k), "only key, operator, values") for k in expr
                if k not in ("key", "operator", "values")]
    if not _is_key(expr.get("key")):
        problems.append(InvalidInput(f"{field}.key", shown(expr.get("key")), _KEY_ALLOWED))
    operator = expr.get("operator")
    if not (isinstance(operator, str) and operator in crd.SELECTOR_OPERATORS):
        problems.append(InvalidInput(f"{field}.operator", shown(operator),
                                     f"one of {', '.join(crd.SELECTOR_OPERATORS)}"))
        return problems
    values = expr.get("values")
    if operator in ("In", "NotIn"):
        if not isinstance(values, list) or not values or len(values) > crd.MAX_SELECTOR_VALUES:
            return [*problems, InvalidInput(f"{field}.values", shown(values), f"a list of 1 to "
                                            f"{crd.MAX_SELECTOR_VALUES} label values (operator {operator})")]
        problems += [InvalidInput(f"{field}.values[{i}]", shown(v), _VALUE_ALLOWED)
                     for i, v in enumerate(values) if not _is_value(v)]
    elif values not in (None, []):
        problems.append(InvalidInput(f"{field}.values", shown(values), f"no values (operator {operator})"))
    return problems


def selector_problems(selector: Any, field: str = "spec.namespaceSelector") -> list[InvalidInput]:
    """Every problem of a label selector (absent: none); what the API server refuses in any LabelSelector."""
    if selector is None:
        return []
    if not isinstance(selector, Mapping):
        return [InvalidInput(field, shown(selector), _SELECTOR_ALLOWED)]
    problems = [InvalidInput(f"{field}.{k}", shown(k), "only matchLabels, matchExpressions") for k in selector
                if k not in ("matchLabels", "matchExpressions")]
    match_labels = selector.get("matchLabels")
    if match_labels is not None:
        if not isinstance(match_labels, Mapping) or len(match_labels) > crd.MAX_SELECTOR_LABELS:
            problems.append(InvalidInput(f"{field}.matchLabels", shown(match_labels),
                                         f"a map of at most {crd.MAX_SELECTOR_LABELS} label keys to label values"))
        else:
            for key, value in match_labels.items():
                if not _is_key(key):
                    problems.append(InvalidInput(f"{field}.matchLabels", shown(key), _KEY_ALLOWED))
                elif not _is_value(value):
                    problems.append(InvalidInput(f"{field}.matchLabels[{key!r}]", shown(value), _VALUE_ALLOWED))
    expressions = selector.get("matchExpressions")
    if expressions is not None:
        if not isinstance(expressions, list) or len(expressions) > crd.MAX_SELECTOR_EXPRESSIONS:
            problems.append(InvalidInput(f"{field}.matchExpressions", shown(expressions),
                                         f"a list of at most {crd.MAX_SELECTOR_EXPRESSIONS} expressions"))
        else:
            for i, expr in enumerate(expressions):
                problems += _expression_problems(expr, f"{field}.matchExpressions[{i}]")
    return problems


def matches(selector: Mapping[str, Any] | None, namespace_labels: Mapping[str, str]) -> bool:
    """Whether ``namespace_labels`` match a (valid) ``selector``; no selector matches every namespace."""
    if selector is None:
        return True
    for key, value in (selector.get("matchLabels") or {}).items():
        if namespace_labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions") or []:
        key, operator, values = expr.get("key"), expr.get("operator"), expr.get("values") or []
        present = key in namespace_labels
        if operator == "In" and not (present and namespace_labels[key] in values):
            return False
        if operator == "NotIn" and present and namespace_labels[key] in values:
            return False
        if operator == "Exists" and not present:
            return False
        if operator == "DoesNotExist" and present:
            return False
    return True


def show_selector(selector: Mapping[str, Any] | None) -> str:
    """A selector as ``kubectl get -l`` writes one: ``team=a,env in (dev,test),!legacy`` (``(every namespace)``)."""
    parts = [f"{k}={v}" for k, v in sorted(((selector or {}).get("matchLabels") or {}).items())]
    for expr in (selector or {}).get("matchExpressions") or []:
        key, operator, values = expr.get("key"), expr.get("operator"), ",".join(expr.get("values") or [])
        parts.append({"In": f"{key} in ({values})", "NotIn": f"{key} notin ({values})", "Exists": str(key),
                      "DoesNotExist": f"!{key}"}.get(str(operator), str(key)))
    return ",".join(parts) or "(every namespace)"


def queue_state(spec: Mapping[str, Any] | None) -> str:
    """``spec.state`` (a stored Queue's, read leniently: anything else is the default, Open)."""
    state = (spec or {}).get("state", crd.STATE_OPEN)
    return state if state in crd.QUEUE_STATES else crd.STATE_OPEN


def admission_problem(field: str, queue: str, spec: Mapping[str, Any] | None, namespace: str,
                      namespace_labels: Mapping[str, str] | None) -> InvalidInput | None:
    """Why new work of ``namespace`` may not enter Queue ``queue`` (its ``spec``), named ``field``; None: it may.

    A Closed queue takes nothing new; a queue whose ``namespaceSelector`` the namespace's labels do not match takes
    nothing from it. ``namespace_labels`` None: the namespace is unknown, and a queue with a selector refuses.
    """
    if queue_state(spec) == crd.STATE_CLOSED:
        return InvalidInput(field, queue, f"a Queue that takes new work: Queue {queue!r} is Closed (spec.state), so "
                                          "it admits no new pods, Jobs or workloads and its admitted work goes on; "
                                          "use another queue, or ask a cluster admin to set its spec.state to Open")
    selector = (spec or {}).get("namespaceSelector")
    if selector is None or (namespace_labels is not None and matches(selector, namespace_labels)):
        return None
    return InvalidInput(field, queue, f"a Queue that admits namespace {namespace!r}: Queue {queue!r} admits only "
                                      f"the namespaces whose labels match {show_selector(selector)} (its "
                                      "spec.namespaceSelector); use a queue that admits this namespace, or ask a "
                                      "cluster admin to label the namespace or change the selector")
