"""Run one vendor tool under a deadline: its own process group, a minimal environment, bounded output.

The tool gets no shell, no descriptor of the agent's (stdin is /dev/null, everything
else closed), a fresh session (so its process group is its own), a scratch working
directory removed afterwards, and an environment of PATH and LANG plus what its entry
names. Only the last CAPTURE_BYTES of stdout and of stderr are kept. When the deadline
passes, or the caller is cancelled, the whole process group is killed and reaped before
this returns; after a normal exit, whatever the tool left running in its group is
killed too, so a programming never leaves a process behind.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from agent.errors import ProgrammingError, ProgrammingTimeout

logger = logging.getLogger(__name__)

#: Bytes of each stream kept (the end: tools print their verdict last).
CAPTURE_BYTES = 16384
#: Characters of each stream shown in a message or an Event.
SHOWN_OUTPUT_CHARS = 300
#: How long the reaping of a killed group may take before it is given up (the kernel owes it).
REAP_TIMEOUT_S = 5.0
BASE_ENVIRONMENT = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"}


class _Tail:
    """The last ``limit`` bytes of a stream and how many it had in all."""

    def __init__(self, limit: int = CAPTURE_BYTES) -> None:
        self.limit = limit
        self.data = bytearray()
        self.total = 0

    def add(self, chunk: bytes) -> None:
        self.total += len(chunk)
        self.data += chunk
        if len(self.data) > self.limit:
            del self.data[: len(self.data) - self.limit]

    def text(self) -> str:
        return self.data.decode("utf-8", errors="replace")


def shown_output(text: str, total_bytes: int) -> str:
    """A stream as messages show it: its end, quoted with escapes, cut to SHOWN_OUTPUT_CHARS."""
    text = text.strip()
    if len(text) <= SHOWN_OUTPUT_CHARS and total_bytes <= CAPTURE_BYTES:
        return repr(text)
    return f"...{text[-SHOWN_OUTPUT_CHARS:]!r} (last {SHOWN_OUTPUT_CHARS} of {total_bytes} bytes)"


@dataclass(frozen=True, slots=True)
class ToolResult:
    """How a tool ended and (the end of) what it printed."""

    argv: tuple[str, ...]
    status: int  # the exit status; -N when signal N ended it
    stdout: str
    stderr: str
    stdout_bytes: int
    stderr_bytes: int
    seconds: float

    def ended(self) -> str:
        """'exited with status 3' or 'was killed by signal SIGSEGV'."""
        if self.status >= 0:
            return f"exited with status {self.status}"
        try:
            name = signal.Signals(-self.status).name
        except ValueError:
            name = f"signal {-self.status}"
        return f"was killed by {name}"

    def output(self) -> str:
        """What it printed, for a message: 'stderr ...; stdout ...' (empty streams left out)."""
        parts = []
        if self.stderr.strip():
            parts.append(f"stderr {shown_output(self.stderr, self.stderr_bytes)}")
        if self.stdout.strip():
            parts.append(f"stdout {shown_output(self.stdout, self.stdout_bytes)}")
        return "; ".join(parts) or "no output"


async def _pump(stream: asyncio.StreamReader | None, tail: _Tail) -> None:
    if stream is None:
        return
    while chunk := await stream.read(65536):
        tail.add(chunk)


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


async def run_tool(
    argv: Sequence[str], deadline: float, what: str, environment: Mapping[str, str] | None = None
) -> ToolResult:
    """Run ``argv`` until it exits or the loop time ``deadline`` passes.

    Raises ProgrammingTimeout (the group killed) when the deadline passes and
    ProgrammingError when the tool cannot be started; ``what`` names the step in both.
    A non-zero exit is returned, not raised: the caller decides what it means.
    """
    loop = asyncio.get_running_loop()
    env = {**BASE_ENVIRONMENT, **(environment or {})}
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="fpga-tool-") as scratch:
        try:
            process = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env=env,
                cwd=scratch,
                close_fds=True,
                start_new_session=True,
            )
        except OSError as exc:
            raise ProgrammingError(f"{what}: cannot start {argv[0]}: {exc.strerror or exc}") from exc
        logger.debug("%s: started %s as process group %d", what, argv[0], process.pid)
        out, err = _Tail(), _Tail()
        pumps = asyncio.gather(_pump(process.stdout, out), _pump(process.stderr, err))
        try:
            async with asyncio.timeout_at(max(deadline, loop.time())):
                status = await process.wait()
                # The tool is gone; anything it left in its group goes too (and lets go of the pipes).
                _kill_group(process.pid)
                await pumps
        except TimeoutError:
            await _reap(process, pumps)
            raise ProgrammingTimeout(
                f"{what}: {argv[0]} did not finish within the deadline; its process group was killed "
                f"(output so far: {_partial(out, err)})"
            ) from None
        except BaseException:
            await _reap(process, pumps)
            raise
    return ToolResult(tuple(argv), status, out.text(), err.text(), out.total, err.total, time.monotonic() - started)


async def _reap(process: asyncio.subprocess.Process, pumps: asyncio.Future[tuple[None, None]]) -> None:
    """Kill the tool's whole group and wait until it is gone and its pipes are closed (bounded)."""
    _kill_group(process.pid)
    try:
        async with asyncio.timeout(REAP_TIMEOUT_S):
            await asyncio.shield(process.wait())
            await asyncio.shield(pumps)
    except TimeoutError:
        logger.error("process group %d did not go away within %.0f s of SIGKILL", process.pid, REAP_TIMEOUT_S)
    except asyncio.CancelledError:
        pumps.cancel()
        raise


def _partial(out: _Tail, err: _Tail) -> str:
    parts = []
    if err.data.strip():
        parts.append(f"stderr {shown_output(err.text(), err.total)}")
    if out.data.strip():
        parts.append(f"stdout {shown_output(out.text(), out.total)}")
    return "; ".join(parts) or "none"
