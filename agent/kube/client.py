"""Connect to the API server: a kubeconfig file (found as kubectl does), or the in-cluster service account."""

from __future__ import annotations

import contextlib
import json
import logging
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import urllib3
import yaml
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException
from kubernetes.config.incluster_config import (
    SERVICE_HOST_ENV_NAME,
    SERVICE_PORT_ENV_NAME,
    InClusterConfigLoader,
)

from agent.errors import KubeError

logger = logging.getLogger(__name__)

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
IN_CLUSTER = "in-cluster service account"
#: How long one request may take (lists and watches have their own).
REQUEST_TIMEOUT_S = 10.0


@dataclass(frozen=True, slots=True)
class KubeconfigChoice:
    """Where the API server's address and credentials come from: a file (and why that one), or in-cluster."""

    path: Path | None
    #: "--kubeconfig", "$KUBECONFIG", "~/.kube/config" or IN_CLUSTER
    origin: str


def resolve_kubeconfig(
    given: Path | None, environ: Mapping[str, str] | None = None, home: Path | None = None
) -> KubeconfigChoice:
    """``given``, else the first existing file of ``$KUBECONFIG``, else ``~/.kube/config``, else in-cluster
    (path None). KubeError when ``$KUBECONFIG`` is set but names only missing files."""
    environ = os.environ if environ is None else environ
    if given is not None:
        return KubeconfigChoice(given, "--kubeconfig")
    entries = [entry for entry in environ.get("KUBECONFIG", "").split(os.pathsep) if entry]
    if entries:
        for entry in entries:
            if Path(entry).is_file():
                return KubeconfigChoice(Path(entry), "$KUBECONFIG")
        raise KubeError(f"$KUBECONFIG names {os.pathsep.join(entries)}: no such file")
    default = (Path.home() if home is None else home) / ".kube" / "config"
    if default.is_file():
        return KubeconfigChoice(default, "~/.kube/config")
    return KubeconfigChoice(None, IN_CLUSTER)


def connect_api(
    given: Path | None, environ: Mapping[str, str] | None = None, home: Path | None = None
) -> client.ApiClient:
    """An ApiClient for the kubeconfig :func:`resolve_kubeconfig` finds; KubeError saying what is missing."""
    choice = resolve_kubeconfig(given, environ, home)
    return build_api_client(choice.path, origin=choice.origin, environ=environ)


@contextlib.contextmanager
def command_api(given: Path | None) -> Iterator[client.ApiClient]:
    """The API client of a one-shot command (:func:`connect_api`), closed afterwards; urllib3's retry warnings
    silenced, since the command's one error line says what failed."""
    logging.getLogger("urllib3").setLevel(logging.ERROR)
    api_client = connect_api(given)
    try:
        yield api_client
    finally:
        api_client.close()  # type: ignore[no-untyped-call]


def build_api_client(
    kubeconfig: Path | None = None,
    *,
    origin: str = "--kubeconfig",
    environ: Mapping[str, str] | None = None,
    service_account_dir: Path = SERVICE_ACCOUNT_DIR,
) -> client.ApiClient:
    """An ApiClient for ``kubeconfig`` if given, else for the pod's service account; the caller closes it.
    KubeError saying what is missing."""
    if kubeconfig is not None:
        return _from_kubeconfig(kubeconfig, origin)
    return _in_cluster(os.environ if environ is None else environ, service_account_dir)


def _from_kubeconfig(path: Path, origin: str) -> client.ApiClient:
    named = f"--kubeconfig {path}" if origin == "--kubeconfig" else f"kubeconfig {path} (from {origin})"
    if not path.is_file():
        raise KubeError(f"{named}: no such file")
    configuration = client.Configuration()
    try:
        config.load_kube_config(  # type: ignore[no-untyped-call]
            config_file=str(path), client_configuration=configuration, persist_config=False
        )
    except (ConfigException, yaml.YAMLError, OSError, TypeError, ValueError, KeyError, AttributeError) as exc:
        raise KubeError(f"{named}: not a usable kubeconfig: {_first_line(exc)}") from exc
    logger.info("API server %s (from kubeconfig %s)", configuration.host, path)
    return client.ApiClient(configuration)


def _in_cluster(environ: Mapping[str, str], service_account_dir: Path) -> client.ApiClient:
    if not environ.get(SERVICE_HOST_ENV_NAME) or not environ.get(SERVICE_PORT_ENV_NAME):
        raise KubeError(
            f"no API server access: not running in a pod ({SERVICE_HOST_ENV_NAME}/{SERVICE_PORT_ENV_NAME} "
            "unset) and no kubeconfig: none given (--kubeconfig), $KUBECONFIG unset, no ~/.kube/config"
        )
    configuration = client.Configuration()
    loader = InClusterConfigLoader(  # type: ignore[no-untyped-call]
        token_filename=str(service_account_dir / "token"),
        cert_filename=str(service_account_dir / "ca.crt"),
        environ=environ,
    )
    try:
        loader.load_and_set(configuration)  # type: ignore[no-untyped-call]
    except (ConfigException, OSError) as exc:
        raise KubeError(
            f"in-cluster config: {exc} (service account files in {service_account_dir}; "
            "is automountServiceAccountToken disabled?)"
        ) from exc
    logger.info("API server %s (in-cluster service account)", configuration.host)
    return client.ApiClient(configuration)


class FailureLog:
    """One activity's failures: the first of each kind a warning, repeats debug lines, the first success after
    failures an info line. Not thread-safe: one owner."""

    def __init__(self, logger: logging.Logger, activity: str) -> None:
        self._logger = logger
        self._activity = activity
        self._seen: set[str] = set()
        self.failures = 0

    def failed(self, kind: str, text: str, consequence: str = "") -> None:
        """Record a failure; log it as a warning only if this kind is new since the last success."""
        self.failures += 1
        level = logging.DEBUG if kind in self._seen else logging.WARNING
        self._seen.add(kind)
        suffix = f"; {consequence}" if consequence else ""
        self._logger.log(level, "%s failed: %s%s", self._activity, text, suffix)

    def succeeded(self) -> None:
        """Record a success; after failures, say once that the activity works again."""
        if self._seen:
            self._logger.info("%s works again after %d failed attempts", self._activity, self.failures)
        self._seen.clear()
        self.failures = 0


def describe_api_error(exc: BaseException) -> tuple[str, str]:
    """(kind, text) of a failed call: kind (``"HTTP 403"``, ``"connection"``) groups repeats for logging once;
    text, for people, carries the API server's Status message where there is one."""
    if isinstance(exc, ApiException):
        status = exc.status or 0
        message = _status_message(exc.body) or str(exc.reason or "").strip()
        if status == 0:
            return "connection", f"cannot reach the API server: {message}"
        return f"HTTP {status}", f"HTTP {status} {message}".rstrip()
    if isinstance(exc, urllib3.exceptions.HTTPError | OSError):
        return "connection", f"cannot reach the API server: {_first_line(exc)}"
    return type(exc).__name__, f"{type(exc).__name__}: {_first_line(exc)}"


def is_transient(exc: BaseException) -> bool:
    """Whether trying the same request again later may succeed (network, 429, 5xx)."""
    if isinstance(exc, ApiException):
        status = exc.status or 0
        return status == 0 or status == 429 or status >= 500
    return isinstance(exc, urllib3.exceptions.HTTPError | OSError)


def api_status(exc: BaseException) -> int | None:
    """The HTTP status of a refused request, None when it never got an answer."""
    if isinstance(exc, ApiException) and exc.status:
        return int(exc.status)
    return None


def _status_message(body: object) -> str:
    if isinstance(body, bytes):
        body = body.decode("utf-8", "replace")
    if not isinstance(body, str) or not body:
        return ""
    try:
        status: Any = json.loads(body)
    except ValueError:
        return body.strip()[:200]
    if isinstance(status, dict):
        reason = str(status.get("reason") or "")
        message = str(status.get("message") or "")
        return f"{reason}: {message}" if reason and message else reason or message
    return ""


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
