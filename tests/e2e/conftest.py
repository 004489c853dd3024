"""The end-to-end suite against a real cluster: opt-in with ``--e2e`` and a ``KUBECONFIG``.

What it needs from the cluster: one Linux node the test may run privileged pods on
(host network, host paths), the image given with ``--e2e-image`` already present on
that node (pods use ``imagePullPolicy: IfNotPresent``), and a kubeconfig allowed to
create a namespace, pods, a ClusterRole and its binding. It runs its own agent on
that node, on simulated slots, as a host-network pod (test_node), and deploys
daemonset/ through a kustomize overlay with the sim backend (test_daemonset): no FPGA,
no deployed fpga-slot and no network access from the node are needed, so a bare test
cluster will do. A node that already runs an fpga-slot agent is left alone. The kubelet
restarts through ``--e2e-kubelet-restart``, a command run where pytest runs.

Without ``--e2e`` (or without ``KUBECONFIG``) every test here is skipped.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.cluster import Cluster, Suite, start_suite

HERE = Path(__file__).parent


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.getgroup("e2e").addoption(
        "--e2e-upgrade-image",
        default="",
        help="another tag of --e2e-image on the node, for the Helm upgrade test (scripts/e2e makes IMAGE-next)",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not config.getoption("--e2e"):
        reason = "end-to-end tests against a cluster: run with --e2e (and KUBECONFIG)"
    elif not os.environ.get("KUBECONFIG"):
        reason = "--e2e needs KUBECONFIG naming the cluster to test"
    else:
        return
    for item in items:
        if HERE in item.path.parents:
            item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(scope="session")
def cluster() -> Iterator[Cluster]:
    with Cluster.connect(Path(os.environ["KUBECONFIG"])) as connected:
        yield connected


@pytest.fixture(scope="module")
def suite(cluster: Cluster, pytestconfig: pytest.Config) -> Iterator[Suite]:
    """A namespace, the agent's RBAC and the agent itself on the node under test; all removed afterwards."""
    with start_suite(
        cluster,
        image=pytestconfig.getoption("--e2e-image"),
        node=pytestconfig.getoption("--e2e-node"),
        kubelet_restart=pytestconfig.getoption("--e2e-kubelet-restart"),
    ) as running:
        yield running
