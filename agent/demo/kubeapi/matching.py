"""Selectors, watch events and patches of the fake API server, as the real server applies them."""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Mapping
from typing import Any

from agent.demo.kubeapi.objects import _FIELDS, _MERGE_KEYS, JSON, ApiError
from agent.demo.kubeapi.store import _Change


def _parse_rv(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise ApiError(400, f"invalid resource version: {text!r}") from None


def _lookup(obj: JSON, dotted: str) -> str:
    value: Any = obj
    for part in dotted.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _selector(resource: str, namespace: str | None, query: Mapping[str, str]) -> Callable[[JSON], bool]:
    """A predicate for the request's namespace, fieldSelector and labelSelector (400 when unsupported)."""
    tests: list[Callable[[JSON], bool]] = []
    if namespace is not None:
        tests.append(lambda o: o["metadata"].get("namespace") == namespace)
    for term in filter(None, query.get("fieldSelector", "").split(",")):
        m = re.fullmatch(r"([^=!]+)(==|=|!=)(.*)", term)
        if not m:
            raise ApiError(400, f"invalid field selector: {term!r}")
        name, op, value = m.groups()
        if name not in _FIELDS[resource]:
            raise ApiError(400, f"field label not supported: {name}")
        tests.append(_field_test(name, op, value))
    for term in filter(None, query.get("labelSelector", "").split(",")):
        tests.append(_label_test(term.strip()))
    return lambda obj: all(t(obj) for t in tests)


def _field_test(name: str, op: str, value: str) -> Callable[[JSON], bool]:
    if op == "!=":
        return lambda o: _lookup(o, name) != value
    return lambda o: _lookup(o, name) == value


def _label_test(term: str) -> Callable[[JSON], bool]:
    def labels(o: JSON) -> dict[str, str]:
        return o["metadata"].get("labels") or {}

    m = re.fullmatch(r"([^=!]+)(==|=|!=)(.*)", term)
    if m:
        key, op, value = m.groups()
        if op == "!=":
            return lambda o: labels(o).get(key) != value
        return lambda o: labels(o).get(key) == value
    if term.startswith("!"):
        return lambda o: term[1:] not in labels(o)
    if re.fullmatch(r"[A-Za-z0-9./_-]+", term):
        return lambda o: term in labels(o)
    raise ApiError(400, f"unable to parse requirement: {term!r}")


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


def _merge_patch(target: Any, patch: Any, *, strategic: bool) -> Any:
    """RFC 7386 JSON merge patch; with ``strategic``, lists in ``_MERGE_KEYS`` merge by their key."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        elif strategic and key in _MERGE_KEYS and isinstance(value, list) and isinstance(result.get(key), list):
            result[key] = _merge_list(result[key], value, _MERGE_KEYS[key])
        else:
            result[key] = _merge_patch(result.get(key), value, strategic=strategic)
    return result


def _merge_list(current: list[Any], patch: list[Any], merge_key: str) -> list[Any]:
    merged = [copy.deepcopy(item) for item in current]
    for item in patch:
        if not isinstance(item, dict) or merge_key not in item:
            raise ApiError(422, f"strategic merge patch: list item without merge key {merge_key!r}")
        for index, existing in enumerate(merged):
            if isinstance(existing, dict) and existing.get(merge_key) == item[merge_key]:
                merged[index] = _merge_patch(existing, item, strategic=True)
                break
        else:
            merged.append(copy.deepcopy(item))
    return merged


def _pointer(path: str) -> list[str]:
    if not path.startswith("/"):
        raise ApiError(422, f"json patch: invalid path {path!r}")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _json_patch(doc: JSON, operations: list[Any]) -> JSON:
    """RFC 6902 with add, remove, replace and test."""
    doc = copy.deepcopy(doc)
    for op in operations:
        if not isinstance(op, dict) or "path" not in op:
            raise ApiError(400, "json patch: an operation needs op and path")
        *parents, last = _pointer(op["path"])
        parent: Any = doc
        for part in parents:
            parent = parent[int(part)] if isinstance(parent, list) else parent.get(part)
            if parent is None:
                raise ApiError(422, f"json patch: missing path {op['path']!r}")
        kind = op.get("op")
        if kind == "test":
            if isinstance(parent, list) and not 0 <= int(last) < len(parent):
                raise ApiError(422, f"json patch: test of a missing index {op['path']!r}")
            current = parent[int(last)] if isinstance(parent, list) else parent.get(last)
            if current != op.get("value"):
                raise ApiError(422, f"json patch: test failed at {op['path']!r}")
        elif kind in ("add", "replace"):
            if kind == "replace" and isinstance(parent, dict) and last not in parent:
                raise ApiError(422, f"json patch: replace of a missing key {op['path']!r}")
            if isinstance(parent, list):
                if last == "-":
                    parent.append(op.get("value"))
                elif kind == "add":
                    parent.insert(int(last), op.get("value"))
                else:
                    parent[int(last)] = op.get("value")
            else:
                parent[last] = op.get("value")
        elif kind == "remove":
            if isinstance(parent, list):
                if not 0 <= int(last) < len(parent):
                    raise ApiError(422, f"json patch: remove of a missing index {op['path']!r}")
                del parent[int(last)]
            elif last in parent:
                del parent[last]
            else:
                raise ApiError(422, f"json patch: remove of a missing key {op['path']!r}")
        else:
            raise ApiError(422, f"json patch: unsupported op {kind!r}")
    return doc
