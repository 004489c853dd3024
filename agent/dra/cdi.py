"""CDI specs for prepared claims: one file per claim, ``<dir>/<driver>-<claim uid>.json``, one device per slot
(its device nodes and the environment a device-plugin container gets)."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path

from agent.dra.constants import DRIVER_NAME
from agent.errors import ProgrammingError, shown
from agent.files.atomic import write_atomically
from agent.slots.model import Slot, container_env

CDI_VERSION = "0.6.0"
#: A claim UID as the API server makes them (a UUID); anything else never reaches a file name.
UID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


class CdiSpecs:
    """The CDI spec files of this driver's prepared claims in one directory."""

    def __init__(self, directory: Path, driver: str = DRIVER_NAME) -> None:
        self.directory = directory
        self.driver = driver
        self.kind = f"{driver}/slot"

    def path(self, claim_uid: str) -> Path:
        if not UID.fullmatch(claim_uid):
            raise ProgrammingError(f"claim UID {shown(claim_uid)} is not a UID")
        return self.directory / f"{self.driver}-{claim_uid}.json"

    def write(self, claim_uid: str, slots: Sequence[Slot]) -> list[str]:
        """Write the claim's spec atomically and return its device IDs, in slot order; ProgrammingError if it cannot
        be written."""
        env = [f"{key}={value}" for key, value in container_env(slots).items()]
        devices = [
            {
                "name": f"{claim_uid}-{slot.id}",
                "containerEdits": {
                    "env": env,
                    "deviceNodes": [
                        {"path": node.container_path, "hostPath": node.host_path, "permissions": "rw"}
                        for node in slot.device_nodes
                    ],
                },
            }
            for slot in slots
        ]
        spec = {"cdiVersion": CDI_VERSION, "kind": self.kind, "devices": devices}
        path = self.path(claim_uid)
        try:
            write_atomically(path, json.dumps(spec, indent=1).encode(), mode=0o600)
        except OSError as exc:
            raise ProgrammingError(f"cannot write the CDI spec {path}: {exc.strerror or exc}") from exc
        return [f"{self.kind}={claim_uid}-{slot.id}" for slot in slots]  # fully qualified CDI device IDs

    def remove(self, claim_uid: str) -> None:
        """Remove the claim's spec; nothing to do when there is none. ProgrammingError if it stays."""
        try:
            self.path(claim_uid).unlink()
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise ProgrammingError(f"cannot remove the CDI spec of claim {claim_uid}: {exc.strerror or exc}") from exc
