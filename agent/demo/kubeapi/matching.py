"""Selector terms, watch events and merge patches of the API server stand-in, as the real server applies them."""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from typing import Any

from agent.demo.kubeapi.objects import JSON, ApiError
from agent.demo.kubeapi.store import _Change


def _parse_rv(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise ApiError(400, f"invalid resource version: {text!r}") from None


#: One term of a selector: key, operator, value.
SELECTOR_TERM = re.compile(r"([^=!]+)(==|=|!=)(.*)")


def _lookup(obj: JSON, dotted: str) -> str:
    value: Any = obj
    for part in dotted.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _field_test(name: str, op: str, value: str) -> Callable[[JSON], bool]:
    return lambda o: (_lookup(o, name) == value) != (op == "!=")


def _watch_event(change: _Change, matches: Callable[[JSON], bool]) -> JSON | None:
    """What a watcher with this selector sees of a change (objects entering/leaving it included)."""
    was = change.old is not None and matches(change.old)
    now = change.new is not None and matches(change.new)
    if change.new is None:
        if not was:
            return None
        assert change.old is not None
        gone = copy.deepcopy(change.old)
        gone["metadata"]["resourceVersion"] = str(change.rv)
        return {"type": "DELETED", "object": gone}
    if now:
        return {"type": "MODIFIED" if was else "ADDED", "object": copy.deepcopy(change.new)}
    if was:
        return {"type": "DELETED", "object": copy.deepcopy(change.new)}
    return None


def _merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = _merge_patch(result.get(key), value)
    return result
