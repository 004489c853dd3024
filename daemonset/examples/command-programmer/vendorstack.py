#!/usr/bin/env python3
"""Stand-ins for the vendor tools of three FPGA stacks, for the command programmer's tests and demo.

Run as ``xbutil`` (AMD XRT), ``fpgaconf`` (Intel OPAE) or ``fpgautil`` (Xilinx embedded),
through the links of those names next to this file, with the subcommands and options the
real tools take for programming and reading back. A "card" is a directory (environment
variable FAKE_FPGA_DIR): ``<device>.loaded`` holds the accelerator id a device holds, the
file ``behaviour`` says how the next programming goes, ``calls`` logs every invocation.

Behaviours: ``ok``; ``fail`` (a message on stderr and exit status 1, or for fpgautil, which
exits 0 either way, its failure line); ``hang`` (never returns, with a child process in its
group); ``partial`` (prints progress, then hangs); ``disagree`` (programs, but the read-back
reports another accelerator). An image names its accelerator as ``uuid=<id>`` in its first
kilobytes, or in its GBS header (the accelerator-type-uuid). Standard library only.
"""

from __future__ import annotations

import json
import os
import re
import struct
import subprocess
import sys
import time
from pathlib import Path

GBS_GUID = b"XeonFPGA\xb7GBSv001"
OTHER_ACCELERATOR = "0badc0de-0000-4000-8000-000000000bad"


def state_dir() -> Path:
    directory = os.environ.get("FAKE_FPGA_DIR")
    if not directory:
        sys.exit("FAKE_FPGA_DIR is not set")
    Path(directory).mkdir(parents=True, exist_ok=True)
    return Path(directory)


def behaviour() -> str:
    path = state_dir() / "behaviour"
    return path.read_text().strip() if path.exists() else "ok"


def accelerator_of(image: Path) -> str:
    data = image.read_bytes()
    if data.startswith(GBS_GUID):
        (length,) = struct.unpack_from("<I", data, len(GBS_GUID))
        meta = json.loads(data[len(GBS_GUID) + 4 : len(GBS_GUID) + 4 + length])
        return str(meta["afu-image"]["accelerator-clusters"][0]["accelerator-type-uuid"]).lower()
    match = re.search(rb"uuid=([0-9A-Za-z-]+)", data[:4096])
    if match is None:
        sys.exit(f"ERROR: {image} is not an image this tool knows")
    return match.group(1).decode()


def dashed(accelerator: str) -> str:
    hexdigits = accelerator.replace("-", "")
    if len(hexdigits) != 32:
        return accelerator
    return "-".join((hexdigits[:8], hexdigits[8:12], hexdigits[12:16], hexdigits[16:20], hexdigits[20:]))


def hang(progress: str | None) -> None:
    if progress:
        print(progress, flush=True)
    child = subprocess.Popen(["sleep", "3600"])  # a helper left in the tool's group
    (state_dir() / "pids").write_text(f"{os.getpid()} {os.getpgid(0)} {child.pid}\n")
    time.sleep(3600)


def program(device: str, image: Path, *, exit_zero_on_failure: bool = False) -> int:
    mode = behaviour()
    if mode == "fail":
        message = f"ERROR: Failed to program device {device}: the PR region is locked (error -16)"
        if exit_zero_on_failure:
            print("BIN FILE loading through FPGA manager failed", flush=True)
            return 0
        print(message, file=sys.stderr, flush=True)
        return 1
    if mode in ("hang", "partial"):
        hang("Programming: 40% done" if mode == "partial" else None)
    accelerator = accelerator_of(image)
    (state_dir() / f"{device}.loaded").write_text(accelerator + "\n")
    print(f"INFO: {image.name} loaded into {device} ({accelerator})", flush=True)
    return 0


def loaded(device: str) -> str | None:
    if behaviour() == "disagree":
        return OTHER_ACCELERATOR
    path = state_dir() / f"{device}.loaded"
    return path.read_text().strip() if path.exists() else None


def option(args: list[str], *names: str) -> str:
    for name in names:
        if name in args and args.index(name) + 1 < len(args):
            return args[args.index(name) + 1]
    sys.exit(f"ERROR: missing {names[0]}")


def xbutil(args: list[str]) -> int:
    command = args[0] if args else ""
    if command == "program":
        return program(option(args, "--device", "-d"), Path(option(args, "--user", "-u")))
    if command == "examine":
        device = option(args, "--device", "-d")
        if option(args, "--report", "-r") != "dynamic-regions":
            sys.exit("ERROR: only the dynamic-regions report is simulated")
        print("  Device Status: HEALTHY")
        accelerator = loaded(device)
        if accelerator is None:
            print("  No hardware contexts running on device")
        else:
            print(f"  Hardware Context ID: 0\n    Xclbin UUID: {dashed(accelerator)}")
        return 0
    if command == "reset":
        (state_dir() / f"{option(args, '--device', '-d')}.loaded").unlink(missing_ok=True)
        print("Successfully reset device")
        return 0
    sys.exit(f"ERROR: unknown command {command!r}")


def fpgaconf(args: list[str]) -> int:
    bus = option(args, "-B", "--bus")
    code = program(f"bus{bus}", Path(args[-1]))
    if code == 0:  # the port's afu_id, as sysfs shows it after a partial reconfiguration
        afu_id = (state_dir() / f"bus{bus}.loaded").read_text().strip().replace("-", "")
        (state_dir() / f"bus{bus}.afu_id").write_text(afu_id + "\n")
    return code


def fpgautil(args: list[str]) -> int:
    # The real tool reads the flag at a fixed argv position: -b <bin> -f <flags>.
    if len(args) < 4 or args[0] != "-b" or args[2] != "-f" or args[3] not in ("Full", "Partial"):
        sys.exit("usage: fpgautil -b <bin file path> -f <Full|Partial>")
    return program("fpga0", Path(args[1]), exit_zero_on_failure=True)


def main() -> int:
    tool = Path(sys.argv[0]).name
    with (state_dir() / "calls").open("a") as log:
        log.write(" ".join([tool, *sys.argv[1:]]) + "\n")
    tools = {"xbutil": xbutil, "fpgaconf": fpgaconf, "fpgautil": fpgautil}
    if tool not in tools:
        sys.exit(f"run me as one of {', '.join(tools)}")
    return tools[tool](sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
