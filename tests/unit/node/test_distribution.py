"""The pure parts of agent.node.distribution: which names a pod's annotations ask for, metric labels of failures."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import pytest

from agent.errors import (
    CacheFullError,
    DeclarationConflict,
    PulledHashMismatch,
    PulledPlatformMismatch,
    PullError,
    PullStorageError,
    SourceAuthError,
    SourceUnreachable,
)
from agent.node.distribution import annotated_bitstreams, parse_object, pull_result


@dataclass(frozen=True)
class Pod:
    annotations: Mapping[str, str]
    namespace: str = "default"
    name: str = "p"
    uid: str = "u"
    phase: str = "Pending"
    created: float = 0.0
    containers: Sequence[tuple[str, int]] = field(default_factory=tuple)


@pytest.mark.parametrize(
    ("annotations", "names"),
    [
        pytest.param({}, set(), id="none"),
        pytest.param({"example.com/fpga-bitstream": "aes"}, {"aes"}, id="the-pods"),
        pytest.param(
            {"example.com/fpga-bitstream": "aes", "example.com/fpga-bitstream.side": "crc"}, {"aes", "crc"}, id="both"
        ),
        pytest.param({"example.com/fpga-bitstream": ""}, set(), id="empty"),
        pytest.param({"example.com/fpga-bitstreams": "x", "other": "y"}, set(), id="other-keys"),
    ],
)
def test_annotated_bitstreams(annotations: dict[str, str], names: set[str]) -> None:
    assert annotated_bitstreams(Pod(annotations)) == names


@pytest.mark.parametrize(
    ("error", "label"),
    [
        pytest.param(SourceUnreachable("x"), "unreachable", id="unreachable"),
        pytest.param(SourceAuthError("x"), "auth", id="auth"),
        pytest.param(PulledHashMismatch("x"), "hash_mismatch", id="hash"),
        pytest.param(PulledPlatformMismatch("x"), "platform_mismatch", id="platform"),
        pytest.param(CacheFullError("x"), "cache_full", id="cache-full"),
        pytest.param(PullStorageError("x"), "storage", id="storage"),
        pytest.param(DeclarationConflict("x"), "conflict", id="conflict"),
        pytest.param(PullError("x"), "failed", id="other"),
    ],
)
def test_pull_result_labels(error: Exception, label: str) -> None:
    assert pull_result(error) == label


def test_a_bad_object_is_a_value_error_the_watch_skips() -> None:
    with pytest.raises(ValueError, match="spec is missing"):
        parse_object({"metadata": {"name": "x"}})
