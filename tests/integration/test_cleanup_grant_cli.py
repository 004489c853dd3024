"""``fpga-agent cleanup-grant`` as the install's Job runs it: a real process that makes the cleanup grant (owned by
the Namespace, bound to the agent's ServiceAccount) once, and leaves it as it is on every later run, against the
fake API server."""

from __future__ import annotations

from pathlib import Path

from agent.kube.cleanupgrant import ACCOUNT, GRANT_RULES, grant_name
from tests.fakeapi import running_apiserver
from tests.integration.test_cluster_cli import fpga_agent, operator_env

NAMESPACE = "fpga-slot"
MADE = f"cleanup grant of namespace {NAMESPACE} for ServiceAccount {ACCOUNT}: made"
THERE = f"cleanup grant of namespace {NAMESPACE} for ServiceAccount {ACCOUNT}: already there"


def test_cleanup_grant_makes_the_grant_once_and_leaves_it_on_the_next_run(tmp_path: Path) -> None:
    with running_apiserver() as api:
        api.namespaces.add(NAMESPACE)
        # As in the Job: the namespace from POD_NAMESPACE.
        env = operator_env(
            tmp_path, KUBECONFIG=str(api.write_kubeconfig(tmp_path / "kubeconfig")), POD_NAMESPACE=NAMESPACE
        )
        done = fpga_agent(tmp_path, "cleanup-grant", env=env)
        assert done.returncode == 0, done.stderr
        assert done.stdout.splitlines() == [MADE]
        name = grant_name(api.namespace_uid(NAMESPACE))
        role = api.cluster_object("clusterroles", name)
        binding = api.cluster_object("clusterrolebindings", name)
        assert role is not None
        assert binding is not None
        assert role["rules"] == [dict(rule) for rule in GRANT_RULES]
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": ACCOUNT, "namespace": NAMESPACE}]
        for obj in (role, binding):
            (owner,) = obj["metadata"]["ownerReferences"]
            assert (owner["kind"], owner["name"], owner["uid"]) == (
                "Namespace",
                NAMESPACE,
                api.namespace_uid(NAMESPACE),
            )
        versions = (role["metadata"]["resourceVersion"], binding["metadata"]["resourceVersion"])
        again = fpga_agent(tmp_path, "cleanup-grant", env=env)
        assert again.returncode == 0, again.stderr
        assert again.stdout.splitlines() == [THERE]
        role, binding = api.cluster_object("clusterroles", name), api.cluster_object("clusterrolebindings", name)
        assert role is not None
        assert binding is not None
        assert (role["metadata"]["resourceVersion"], binding["metadata"]["resourceVersion"]) == versions


def test_cleanup_grant_for_a_missing_namespace_says_so_and_makes_nothing(tmp_path: Path) -> None:
    with running_apiserver() as api:
        env = operator_env(tmp_path, KUBECONFIG=str(api.write_kubeconfig(tmp_path / "kubeconfig")))
        done = fpga_agent(tmp_path, "cleanup-grant", "--namespace", "elsewhere", env=env)
        assert done.returncode == 1
        assert done.stdout == ""
        errors = [line for line in done.stderr.splitlines() if line.startswith("fpga-agent cleanup-grant: ")]
        assert len(errors) == 1, done.stderr
        assert errors[0].startswith("fpga-agent cleanup-grant: cannot read namespace elsewhere: HTTP 404"), errors
        assert api.requests("POST") == []
