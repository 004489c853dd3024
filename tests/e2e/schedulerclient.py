"""Calls to the deployed extender as the fpga-scheduler makes them.

The shipped extender answers only HTTPS clients with the scheduler's certificate, so
neither the test process nor the API server's pod proxy can call it. A short-lived pod
can: it runs where the scheduler runs (its network: the host's or the pod network; on
the extender's node when that is the host's loopback), mounts the scheduler's client
Secret and reads the URL and server name from the scheduler's own configuration. It
prints one JSON line, which the test reads from its log.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import yaml

from tests.e2e.cluster import WAIT_S, Cluster

NAMESPACE = "fpga-slot"
CLIENT_SECRET = "fpga-scheduler-extender-client"
TLS_DIR = "/tls"

#: Runs in the pod (the project's image: Python, and agent.cluster.certs for a certificate of another CA).
#: argv[1]: {"host", "port", "server_name", "mode", "body", "prefer", "others", "wait_s"}
CLIENT = r"""
import json, socket, ssl, sys, time
job = json.loads(sys.argv[1])

def call(context, body):
    sock = socket.create_connection((job["host"], job["port"]), timeout=10)
    if context is not None:
        sock = context.wrap_socket(sock, server_hostname=job["server_name"])
    data = json.dumps(body).encode()
    sock.sendall(b"POST /prioritize HTTP/1.1\r\nHost: extender\r\nContent-Type: application/json\r\n"
                 + b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(data) + data)
    answer = b""
    while chunk := sock.recv(65536):
        answer += chunk
    sock.close()
    if not answer:
        raise ConnectionError("closed without an answer")
    head, _, rest = answer.partition(b"\r\n\r\n")
    return int(head.split()[1]), rest.decode(errors="replace")

def context(cert=None):
    made = ssl.create_default_context(cafile="/tls/ca.crt")
    if cert:
        made.load_cert_chain(*cert)
    return made

def outcome(ctx):
    try:
        return str(call(ctx, job["body"])[0])
    except Exception as exc:
        return "refused: " + type(exc).__name__

if job["mode"] == "clients":
    from agent.cluster.certs import issue
    other = issue(["other"], client_name="fpga-scheduler", days=1)
    open("/tmp/other.crt", "wb").write(other.client_cert)
    open("/tmp/other.key", "wb").write(other.client_key)
    print(json.dumps({
        "scheduler": outcome(context(("/tls/tls.crt", "/tls/tls.key"))),
        "no-certificate": outcome(context()),
        "other-ca": outcome(context(("/tmp/other.crt", "/tmp/other.key"))),
        "plain-http": outcome(None),
    }))
else:
    deadline, last = time.monotonic() + job["wait_s"], None
    while time.monotonic() < deadline:
        try:
            status, text = call(context(("/tls/tls.crt", "/tls/tls.key")), job["body"])
            last = json.loads(text) if status == 200 else text
        except Exception as exc:
            last = "failed: " + repr(exc)
        scores = {e["Host"]: e["Score"] for e in last} if isinstance(last, list) else {}
        if scores.get(job["prefer"], 0) > max([scores.get(o, 0) for o in job["others"]] or [0]):
            print(json.dumps({"preferred": True, "answer": last}))
            break
        time.sleep(0.5)
    else:
        print(json.dumps({"preferred": False, "answer": last}))
"""


@dataclass(frozen=True)
class SchedulerClient:
    """Where the fpga-scheduler finds the extender, and how to call it from a pod as the scheduler does."""

    cluster: Cluster
    image: str

    def target(self) -> tuple[str, int, str, bool]:
        """(host, port, TLS server name, host network) from the deployed scheduler's configuration and pods."""
        maps = self.cluster.core.list_namespaced_config_map(NAMESPACE).items
        (config_map,) = [m for m in maps if m.metadata.name.startswith("fpga-scheduler-config")]
        config = yaml.safe_load(config_map.data["scheduler-config.yaml"])
        (extender,) = config["extenders"]
        url = urlsplit(extender["urlPrefix"])
        assert url.scheme == "https", extender
        assert extender["enableHTTPS"], extender
        assert url.hostname is not None
        assert url.port is not None
        server_name = extender["tlsConfig"].get("serverName") or url.hostname
        scheduler = self.cluster.apps.read_namespaced_deployment("fpga-scheduler", NAMESPACE)
        return url.hostname, url.port, server_name, bool(scheduler.spec.template.spec.host_network)

    def run(self, job: dict[str, Any]) -> dict[str, Any]:
        """Run the client with ``job`` in a pod; its JSON answer."""
        host, port, server_name, host_network = self.target()
        name = f"e2e-scheduler-client-{secrets.token_hex(3)}"
        spec: dict[str, Any] = {
            "hostNetwork": host_network,
            "dnsPolicy": "ClusterFirstWithHostNet" if host_network else "ClusterFirst",
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 1,
            "tolerations": [{"operator": "Exists"}],
            "securityContext": {"runAsNonRoot": True, "runAsUser": 65532, "runAsGroup": 65532, "fsGroup": 65532},
            "containers": [
                {
                    "name": "client",
                    "image": self.image,
                    "imagePullPolicy": "IfNotPresent",
                    "command": ["python", "-c", CLIENT, json.dumps({**job, "host": host, "port": port,
                                                                    "server_name": server_name})],
                    "volumeMounts": [{"name": "tls", "mountPath": TLS_DIR, "readOnly": True}],
                }
            ],
            "volumes": [{"name": "tls", "secret": {"secretName": CLIENT_SECRET, "defaultMode": 0o440}}],
        }  # fmt: skip
        if host_network and host.startswith("127."):  # the extender's node's loopback: be on that node
            pods = self.cluster.core.list_namespaced_pod(
                NAMESPACE, label_selector="app.kubernetes.io/component=extender"
            ).items
            spec["nodeName"] = pods[0].spec.node_name
        body = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": NAMESPACE}, "spec": spec}
        self.cluster.core.create_namespaced_pod(NAMESPACE, body)
        try:
            finished = self.cluster.wait_pod(
                NAMESPACE, name, lambda p: p.status.phase in ("Succeeded", "Failed"), "finished"
            )
            log = self.cluster.logs(NAMESPACE, name)
            assert finished.status.phase == "Succeeded", f"the scheduler's client failed:\n{log}"
            answer: dict[str, Any] = json.loads(log.strip().splitlines()[-1])
            return answer
        finally:
            self.cluster.core.delete_namespaced_pod(name, NAMESPACE, grace_period_seconds=0)

    def outcomes(self, body: dict[str, Any]) -> dict[str, str]:
        """The scheduler's certificate, none, another CA's and plain HTTP: each one's HTTP status or refusal."""
        return self.run({"mode": "clients", "body": body})

    def wait_prefers(self, body: dict[str, Any], node: str, others: list[str]) -> dict[str, Any]:
        """Ask prioritize, as the scheduler does, until ``node`` scores above ``others`` (or the wait ends)."""
        return self.run({"mode": "prefer", "body": body, "prefer": node, "others": others, "wait_s": WAIT_S / 2})
