"""RBAC: the roles grant every API request the code makes, and nothing more.

The requests are read from the source of ``agent.kube`` (the only package that talks
to the API server): every kubernetes client method it calls, plus ``watch`` for each
list method it hands to the reflector. The client's own code says which HTTP method
and path each method sends, which gives the RBAC group, resource and verb. That must
be the table in ``tests/deploy/api_access.py``, and each component's ClusterRole must grant
exactly that component's part of it.
"""

from __future__ import annotations

import ast
import inspect
import re
from collections import defaultdict
from pathlib import Path

import pytest
import yaml
from kubernetes import client

import agent.kube
from agent.cli.certs import CLIENT_SECRET, SERVER_SECRET
from agent.kube.cleanupgrant import ACCOUNT, FINALIZER, GRANT_PREFIX, GRANT_RULES, grant_objects
from agent.kube.core import CoreCalls
from tests.deploy.api_access import API_ACCESS
from tests.deploy.manifests import DAEMONSET_DIR, Manifests, Obj, load_documents, render

Rule = tuple[str, str, str]  # (group, resource, verb)
NamedRule = tuple[str, str, str, tuple[str, ...]]  # and the resourceNames it is limited to
KUBE_DIR = Path(agent.kube.__file__).parent
#: component -> (ServiceAccount, ClusterRole, workload kind, workload name)
IDENTITIES = {
    "agent": ("fpga-slot-agent", "fpga-slot-agent", "DaemonSet", "fpga-slot-agent"),
    "extender": ("fpga-slot-extender", "fpga-slot-extender", "Deployment", "fpga-slot-extender"),
}
#: The install's Job that makes the cleanup grant: (ServiceAccount, ClusterRole, Job)
GRANT_JOB = ("fpga-slot-cleanup-grant", "fpga-slot-cleanup-grant", "fpga-slot-cleanup-grant")
RBAC_GROUP = "rbac.authorization.k8s.io"
#: Verbs on RBAC objects that let an account grant permissions (to itself or another)
GRANTING_VERBS = {"create", "update", "patch", "escalate", "bind", "*"}
_PATH = re.compile(r"""['"](/apis?/[^'"]+)['"]""")
_METHOD = re.compile(r"""['"](GET|POST|PUT|PATCH|DELETE)['"]""")
_VERBS = {"POST": "create", "PUT": "update", "PATCH": "patch"}


def api_classes() -> dict[str, type]:
    """The generated API classes, and agent.kube's own CoreCalls (the same methods, built on ApiClient)."""
    # dir(), not vars(): the client's package loads its API classes on first use.
    apis = {name: getattr(client, name) for name in dir(client) if name.endswith("Api")}
    apis = {name: cls for name, cls in apis.items() if isinstance(cls, type)}
    return {**apis, "CoreCalls": CoreCalls}


def request_of(api: type, method: str) -> Rule:
    """(group, resource, verb) of one client method, from the path and HTTP method its code sends."""
    source = ""
    for helper in (f"_{method}_serialize", f"{method}_with_http_info", method):
        if hasattr(api, helper):
            source = inspect.getsource(getattr(api, helper))
            break
    path_match, method_match = _PATH.search(source), _METHOD.search(source)
    assert path_match, f"{api.__name__}.{method}: no request path in the client's code"
    assert method_match, f"{api.__name__}.{method}: no HTTP method in the client's code"
    parts = path_match.group(1).strip("/").split("/")
    group, rest = ("", parts[2:]) if parts[0] == "api" else (parts[1], parts[3:])
    if rest[:1] == ["namespaces"] and len(rest) > 2:
        rest = rest[2:]  # namespaced: /namespaces/{namespace}/<resource>...
    resource, named, subresource = rest[0], len(rest) > 1, rest[2] if len(rest) > 2 else None
    http = method_match.group(1)
    if http == "GET":
        verb = "get" if named else "list"
    elif http == "DELETE":
        verb = "delete" if named else "deletecollection"
    else:
        verb = _VERBS[http]
    return group, f"{resource}/{subresource}" if subresource else resource, verb


def scan_module(path: Path, apis: dict[str, type]) -> dict[str, set[Rule]]:
    """Owner (top-level class or function) -> the requests its code makes."""
    tree = ast.parse(path.read_text())
    receivers: dict[str, type] = {}  # variable or attribute name -> API class it holds
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
            func = node.value.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            if name in apis:
                for target in node.targets:
                    receivers[target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", "")] = apis[
                        name
                    ]
    found: dict[str, set[Rule]] = defaultdict(set)
    for top in tree.body:
        if not isinstance(top, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        owner = f"{path.stem}.{top.name}"
        handed = [  # the reflector's list_func argument, or what a variable of that name is set to
            keyword.value
            for node in ast.walk(top)
            if isinstance(node, ast.Call)
            for keyword in node.keywords
            if keyword.arg == "list_func"
        ] + [
            node.value
            for node in ast.walk(top)
            if isinstance(node, ast.Assign)
            and any(isinstance(name, ast.Name) and name.id == "list_func" for t in node.targets for name in ast.walk(t))
        ]
        watched = {id(part) for value in handed for part in ast.walk(value)}
        for node in ast.walk(top):
            if not isinstance(node, ast.Attribute):
                continue
            receiver = node.value
            holder = receiver.attr if isinstance(receiver, ast.Attribute) else getattr(receiver, "id", None)
            api = receivers.get(holder or "")
            if api is None or not callable(getattr(api, node.attr, None)) or node.attr.startswith("_"):
                continue
            group, resource, verb = request_of(api, node.attr)
            found[owner].add((group, resource, verb))
            if id(node) in watched:
                assert verb == "list", f"{owner}: {node.attr} handed to the reflector is not a list"
                found[owner].add((group, resource, "watch"))
    return dict(found)


def requests_in_code() -> dict[str, set[Rule]]:
    apis = api_classes()
    found: dict[str, set[Rule]] = {}
    for path in sorted(KUBE_DIR.glob("*.py")):
        found.update(scan_module(path, apis))
    return found


def declared() -> dict[str, set[Rule]]:
    """The table's requests by owner (not the checks the API server makes on top of a request)."""
    table: dict[str, set[Rule]] = defaultdict(set)
    for access in API_ACCESS:
        if access.checked_on:
            continue
        table[access.owner] |= {(access.group, access.resource, verb) for verb in access.verbs}
    return dict(table)


def granted(role: Obj) -> set[Rule]:
    """What a role grants, as (group, resource, verb); see :func:`granted_by_name` for rules limited to names."""
    return {(g, r, v) for g, r, v, _names in granted_by_name(role)}


def granted_by_name(role: Obj) -> set[NamedRule]:
    """(group, resource, verb, resourceNames) of every rule (names () when the rule is not limited to names)."""
    rules: set[NamedRule] = set()
    for rule in role["rules"]:
        assert "nonResourceURLs" not in rule
        names = tuple(sorted(rule.get("resourceNames", ())))
        rules |= {(g, r, v, names) for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"]}
    return rules


# ----------------------------------------------------------------- the scanner
@pytest.mark.parametrize(
    ("api", "method", "expected"),
    [
        pytest.param(client.CoreV1Api, "list_pod_for_all_namespaces", ("", "pods", "list"), id="list-all"),
        pytest.param(client.CoreV1Api, "create_namespaced_event", ("", "events", "create"), id="create-namespaced"),
        pytest.param(client.CoreV1Api, "read_node", ("", "nodes", "get"), id="get"),
        pytest.param(client.CoreV1Api, "patch_node", ("", "nodes", "patch"), id="patch"),
        pytest.param(client.CoreV1Api, "patch_node_status", ("", "nodes/status", "patch"), id="subresource"),
        pytest.param(client.CoreV1Api, "replace_namespaced_pod", ("", "pods", "update"), id="update"),
        pytest.param(
            client.CoordinationV1Api, "read_namespaced_lease", ("coordination.k8s.io", "leases", "get"), id="group"
        ),
        pytest.param(
            client.EventsV1Api, "create_namespaced_event", ("events.k8s.io", "events", "create"), id="events-group"
        ),
        pytest.param(
            client.CoreV1Api, "delete_collection_namespaced_pod", ("", "pods", "deletecollection"), id="collection"
        ),
    ],
)  # fmt: skip
def test_a_client_method_maps_to_its_request(api: type, method: str, expected: Rule) -> None:
    assert request_of(api, method) == expected


def test_the_scanner_sees_calls_on_attributes_and_list_methods_handed_to_the_reflector(tmp_path: Path) -> None:
    module = tmp_path / "sample.py"
    module.write_text(
        "from kubernetes import client\n"
        "class Watcher:\n"
        "    def __init__(self, api_client):\n"
        "        core = client.CoreV1Api(api_client)\n"
        "        self._reflector = Reflector(list_func=core.list_namespaced_config_map)\n"
        "class Writer:\n"
        "    def __init__(self, api_client):\n"
        "        self._core = client.CoreV1Api(api_client)\n"
        "    def write(self):\n"
        "        self._core.delete_namespaced_secret('n', 'ns')\n"
        "class Table:\n"
        "    def __init__(self, api_client, kind):\n"
        "        core = client.CoreV1Api(api_client)\n"
        "        list_func = {'secrets': core.list_namespaced_secret}[kind]\n"
        "        self._reflector = Reflector(list_func=list_func)\n"
        "def helper():\n"
        "    return 1\n"
    )
    assert scan_module(module, api_classes()) == {
        "sample.Watcher": {("", "configmaps", "list"), ("", "configmaps", "watch")},
        "sample.Table": {("", "secrets", "list"), ("", "secrets", "watch")},
        "sample.Writer": {("", "secrets", "delete")},
    }


# --------------------------------------------------------------- code vs table
def test_the_table_lists_every_request_the_code_makes_and_no_other() -> None:
    found = requests_in_code()
    assert found  # the scanner finds the calls at all
    assert found == declared()


def test_a_check_on_top_of_a_request_names_a_request_its_owner_makes() -> None:
    found = requests_in_code()
    checks = [access for access in API_ACCESS if access.checked_on]
    assert checks
    for access in checks:
        resource, verb = access.checked_on.split()
        assert (access.group, resource, verb) in found[access.owner], access


def test_the_agent_writes_claim_device_status_for_its_own_node_and_driver_only() -> None:
    """DRAResourceClaimGranularStatusAuthorization: a status.devices write also needs resourceclaims/driver,
    associated-node (the claim is allocated to the node the token's pod runs on) or arbitrary-node (any claim).
    The agent holds associated-node:patch for its driver's name only, and nothing arbitrary-node or update."""
    rules = granted_by_name(Manifests(render()).get("ClusterRole", "fpga-slot-agent"))
    driver_rules = {rule for rule in rules if rule[1] == "resourceclaims/driver"}
    assert driver_rules == {
        ("resource.k8s.io", "resourceclaims/driver", "associated-node:patch", ("fpga.example.com",))
    }
    assert {(g, r, v) for g, r, v, _n in rules if r.startswith("resourceclaims")} == {
        ("resource.k8s.io", "resourceclaims", "get"),
        ("resource.k8s.io", "resourceclaims", "list"),
        ("resource.k8s.io", "resourceclaims", "watch"),
        ("resource.k8s.io", "resourceclaims/status", "patch"),
        ("resource.k8s.io", "resourceclaims/driver", "associated-node:patch"),
    }


def test_every_table_entry_names_who_makes_it() -> None:
    for access in API_ACCESS:
        assert access.component in ("agent", "extender", "certs", "grant", "operator")
        assert access.why


# --------------------------------------------------------------- table vs RBAC
@pytest.mark.parametrize("component", sorted(IDENTITIES))
def test_the_cluster_role_grants_exactly_what_the_component_requests(component: str) -> None:
    manifests = Manifests(render())
    _account, role_name, _kind, _name = IDENTITIES[component]
    wanted = {
        (access.group, access.resource, verb, tuple(sorted(access.names)))
        for access in API_ACCESS
        if access.component == component and not access.namespace
        for verb in access.verbs
    }
    assert granted_by_name(manifests.get("ClusterRole", role_name)) == wanted


@pytest.mark.parametrize("component", sorted(IDENTITIES))
def test_namespaced_requests_are_granted_by_a_role_in_their_namespace_only(component: str) -> None:
    manifests = Manifests(render())
    account = IDENTITIES[component][0]
    wanted: dict[str, set[Rule]] = defaultdict(set)
    for access in API_ACCESS:
        if access.component == component and access.namespace:
            wanted[access.namespace] |= {(access.group, access.resource, verb) for verb in access.verbs}
    found: dict[str, set[Rule]] = defaultdict(set)
    for binding in manifests.of_kind("RoleBinding"):
        if any(s["kind"] == "ServiceAccount" and s["name"] == account for s in binding["subjects"]):
            namespace = binding["metadata"]["namespace"]
            assert binding["roleRef"]["kind"] == "Role"
            found[namespace] |= granted(manifests.get("Role", binding["roleRef"]["name"], namespace))
    assert found == wanted


@pytest.mark.parametrize("component", sorted(IDENTITIES))
def test_the_role_is_bound_to_the_account_the_workload_runs_as(component: str) -> None:
    manifests = Manifests(render())
    account, role_name, kind, name = IDENTITIES[component]
    bindings = [
        binding
        for binding in manifests.of_kind("ClusterRoleBinding")
        if any(s["kind"] == "ServiceAccount" and s["name"] == account for s in binding["subjects"])
    ]
    assert [binding["roleRef"]["name"] for binding in bindings] == [role_name]
    (subject,) = bindings[0]["subjects"]
    assert subject["namespace"] == "fpga-slot"
    workload = manifests.get(kind, name, "fpga-slot")
    assert workload["spec"]["template"]["spec"]["serviceAccountName"] == account


def test_the_certs_job_reads_its_two_secrets_by_name_and_creates_secrets_in_its_namespace_only() -> None:
    """``fpga-agent certs`` as the Job runs it: a Role in fpga-slot, nothing cluster-wide, reads limited to the
    two Secrets the command makes and the workloads mount."""
    manifests = Manifests(render())
    job = manifests.get("Job", "fpga-slot-certs", "fpga-slot")
    account = job["spec"]["template"]["spec"]["serviceAccountName"]
    wanted = {
        (access.namespace, access.group, access.resource, verb, access.names)
        for access in API_ACCESS
        if access.component == "certs" and access.namespace  # DRA mode's cluster-wide grant: the next test
        for verb in access.verbs
    }
    found = set()
    for binding in manifests.of_kind("ClusterRoleBinding") + manifests.of_kind("RoleBinding"):
        if not any(s["kind"] == "ServiceAccount" and s["name"] == account for s in binding["subjects"]):
            continue
        assert binding["kind"] == "RoleBinding"
        assert binding["roleRef"]["kind"] == "Role"
        namespace = binding["metadata"]["namespace"]
        for rule in manifests.get("Role", binding["roleRef"]["name"], namespace)["rules"]:
            names = tuple(rule.get("resourceNames", ()))
            found |= {
                (namespace, g, r, v, names) for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"]
            }
    assert found == wanted
    (read,) = [a for a in API_ACCESS if a.component == "certs" and a.resource == "secrets" and "get" in a.verbs]
    assert set(read.names) == {SERVER_SECRET, CLIENT_SECRET}
    mounted = {
        volume["secret"]["secretName"]
        for kind, name in (("Deployment", "fpga-slot-extender"), ("Deployment", "fpga-scheduler"))
        for volume in manifests.get(kind, name, "fpga-slot")["spec"]["template"]["spec"]["volumes"]
        if "secret" in volume
    }
    assert mounted == {SERVER_SECRET, CLIENT_SECRET}


def test_in_dra_mode_the_certs_job_may_set_the_bitstream_webhooks_ca_bundle_and_nothing_else() -> None:
    """daemonset/dra-mode adds a ClusterRole for the Job's account: get and patch of the one
    ValidatingWebhookConfiguration the component ships, whose name the Job is given."""
    component = DAEMONSET_DIR / "dra-mode"
    documents = load_documents(component / "bitstream-webhook.yaml")
    dra = Manifests(documents)
    (configuration,) = dra.of_kind("ValidatingWebhookConfiguration")
    (binding,) = dra.of_kind("ClusterRoleBinding")
    job = Manifests(render()).get("Job", "fpga-slot-certs", "fpga-slot")
    account = job["spec"]["template"]["spec"]["serviceAccountName"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": account, "namespace": "fpga-slot"}]
    role = dra.get("ClusterRole", binding["roleRef"]["name"])
    found = {
        (g, r, v, tuple(rule.get("resourceNames", ())))
        for rule in role["rules"]
        for g in rule["apiGroups"]
        for r in rule["resources"]
        for v in rule["verbs"]
    }
    wanted = {
        (a.group, a.resource, verb, a.names)
        for a in API_ACCESS
        if a.component == "certs" and not a.namespace
        for verb in a.verbs
    }
    assert found == wanted
    assert {names for *_rule, names in found} == {(configuration["metadata"]["name"],)}
    kustomization = yaml.safe_load((component / "kustomization.yaml").read_text())
    (patch,) = [p for p in kustomization["patches"] if p["target"]["kind"] == "Job"]
    assert patch["target"]["name"] == job["metadata"]["name"]
    (operation,) = yaml.safe_load(patch["patch"])
    assert operation["value"] == f"--webhook-configuration={configuration['metadata']['name']}"


def bound_roles(manifests: Manifests, account: str) -> list[Obj]:
    """Every ClusterRole and Role bound to the ServiceAccount ``account`` of fpga-slot."""
    roles = []
    for binding in manifests.of_kind("ClusterRoleBinding") + manifests.of_kind("RoleBinding"):
        if any(
            s["kind"] == "ServiceAccount" and s["name"] == account and s.get("namespace", "fpga-slot") == "fpga-slot"
            for s in binding["subjects"]
        ):
            ref = binding["roleRef"]
            namespace = binding["metadata"].get("namespace") if ref["kind"] == "Role" else None
            roles.append(manifests.get(ref["kind"], ref["name"], namespace))
    return roles


def test_the_agent_can_create_escalate_or_bind_no_rbac_object() -> None:
    """A node agent runs on every node: none of its roles lets it make, change or bind a role (the cleanup grant is
    made by the install's Job instead)."""
    manifests = Manifests(render())
    roles = bound_roles(manifests, ACCOUNT)
    assert {role["metadata"]["name"] for role in roles} == {
        "fpga-slot-agent",
        "fpga-slot-agent-pull-secrets",
        "fpga-slot-agent-node-state",
    }
    for role in roles:
        for rule in role["rules"]:
            if RBAC_GROUP in rule["apiGroups"] or "*" in rule["apiGroups"]:
                assert not GRANTING_VERBS & set(rule["verbs"]), (role["metadata"]["name"], rule)
            assert "*" not in rule["resources"], (role["metadata"]["name"], rule)


def test_the_grant_job_holds_its_requests_and_the_grants_rules_and_nothing_else() -> None:
    """``fpga-agent cleanup-grant`` as the Job runs it: its own account and ClusterRole, which grant the requests the
    command makes, plus the grant's rules, without which the API server refuses to create or bind a role holding
    them; no ``escalate`` or ``bind``."""
    manifests = Manifests(render())
    account, role_name, job_name = GRANT_JOB
    job = manifests.get("Job", job_name, "fpga-slot")
    assert job["spec"]["template"]["spec"]["serviceAccountName"] == account
    (container,) = job["spec"]["template"]["spec"]["containers"]
    assert container["args"] == ["cleanup-grant"]
    (role,) = bound_roles(manifests, account)
    assert role["kind"] == "ClusterRole"
    assert role["metadata"]["name"] == role_name
    requests = {
        (access.group, access.resource, verb, tuple(sorted(access.names)))
        for access in API_ACCESS
        if access.component == "grant"
        for verb in access.verbs
    }
    assert {(RBAC_GROUP, "clusterroles", "create", ()), (RBAC_GROUP, "clusterrolebindings", "create", ())} <= requests
    grant_role, _binding = grant_objects("fpga-slot", "uid-1")
    assert granted_by_name(role) == requests | granted_by_name(grant_role)
    assert not {verb for _g, _r, verb, _n in granted_by_name(role)} & {"escalate", "bind", "*"}
    assert not [a for a in API_ACCESS if a.owner.startswith("cleanupgrant.") and a.component != "grant"]


def test_the_cleanup_grant_holds_what_a_clean_stop_needs_and_no_more_than_the_agent_holds() -> None:
    """The grant allows every request of a clean stop that is an uninstall, and nothing the agent's own ClusterRole
    does not grant while it is installed."""
    manifests = Manifests(render())
    role, binding = grant_objects("fpga-slot", "uid-1")
    assert granted_by_name(role) == {
        (g, r, v, tuple(sorted(rule.get("resourceNames", ()))))
        for rule in GRANT_RULES
        for g in rule["apiGroups"]
        for r in rule["resources"]
        for v in rule["verbs"]
    }
    held = granted_by_name(manifests.get("ClusterRole", "fpga-slot-agent"))
    assert granted_by_name(role) <= held
    stop_owners = ("uninstall.", "nodes.NodePublisher")
    needed = {
        (access.group, access.resource, verb, tuple(sorted(access.names)))
        for access in API_ACCESS
        # not the FpgaNodeState's requests: a Role in the namespace grants them, and an uninstall leaves the
        # object to the garbage collector
        if access.component == "agent" and access.owner.startswith(stop_owners) and not access.namespace
        for verb in access.verbs
    }
    assert needed <= granted_by_name(role)
    assert (
        binding["roleRef"]["name"] == role["metadata"]["name"] == binding["metadata"]["name"] == GRANT_PREFIX + "uid-1"
    )
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": ACCOUNT, "namespace": "fpga-slot"}]
    for obj in (role, binding):
        (owner,) = obj["metadata"]["ownerReferences"]
        assert (owner["kind"], owner["name"], owner["uid"]) == ("Namespace", "fpga-slot", "uid-1")
    # In no manifest: `kubectl delete -k` would delete it with the rest.
    assert not [o for o in manifests.objects if o["metadata"]["name"].startswith(GRANT_PREFIX)]


def test_only_the_agents_service_account_carries_the_cleanup_finalizer() -> None:
    """The account's finalizer keeps its tokens valid while the agents clear their Nodes; RBAC objects carry none
    (the last agent could not remove the finalizer of the role that lets it do so)."""
    carriers = [
        (o["kind"], o["metadata"]["name"]) for o in Manifests(render()).objects if o["metadata"].get("finalizers")
    ]
    assert carriers == [("ServiceAccount", ACCOUNT)]
    account = Manifests(render()).get("ServiceAccount", ACCOUNT, "fpga-slot")
    assert account["metadata"]["finalizers"] == [FINALIZER]


def test_operator_requests_are_granted_to_no_workload() -> None:
    """fpga-agent cluster runs with a person's own kubeconfig."""
    operator = {
        (access.group, access.resource, verb)
        for access in API_ACCESS
        if access.component == "operator"
        for verb in access.verbs
    }
    assert operator
    for component in IDENTITIES:
        role = Manifests(render()).get("ClusterRole", IDENTITIES[component][1])
        extra = operator - {(a.group, a.resource, v) for a in API_ACCESS if a.component == component for v in a.verbs}
        assert not extra & granted(role)


def test_no_request_bypasses_the_client_methods() -> None:
    """Raw requests (``call_api``, the REST client) would escape the scan above.

    Only ``core.py`` builds requests itself, in ``CoreCalls._request``, which only its
    public methods call, each naming its path and HTTP method (what the scan reads).
    """
    for path in sorted(KUBE_DIR.glob("*.py")):
        if path.name == "core.py":
            continue
        text = path.read_text()
        for raw in ("call_api", "rest_client", "param_serialize", "DynamicClient", "_request("):
            assert raw not in text, f"{path.name} uses {raw}"
    (core,) = [n for n in ast.parse((KUBE_DIR / "core.py").read_text()).body if isinstance(n, ast.ClassDef)]
    for method in core.body:
        if not isinstance(method, ast.FunctionDef) or method.name.startswith("_"):
            continue
        source = ast.unparse(method)
        assert _PATH.search(source), f"CoreCalls.{method.name} names no request path"
        assert _METHOD.search(source), f"CoreCalls.{method.name} names no HTTP method"
    callers = {
        method.name
        for method in core.body
        if isinstance(method, ast.FunctionDef)
        for node in ast.walk(method)
        if isinstance(node, ast.Attribute) and node.attr == "_request"
    }
    assert callers
    assert all(not name.startswith("_") for name in callers), callers
