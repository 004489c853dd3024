"""Run one vendor tool under a deadline: its own process group, a minimal environment, bounded output.

No shell, no inherited descriptors, a scratch working directory; only the last CAPTURE_BYTES of each
stream are kept. Past the deadline, on cancellation and after exit, the group and any process that
escaped it are killed, so a programming never leaves a process behind."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
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
#: How long the output is read after the tool exited (and its group was killed) before it is given up.
DRAIN_AFTER_EXIT_S = 1.0
#: Attempts at removing the scratch directory, and the pause between them.
SCRATCH_REMOVE_ATTEMPTS = 5
SCRATCH_REMOVE_PAUSE_S = 0.05
BASE_ENVIRONMENT = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"}


class _Tail:
    """The last CAPTURE_BYTES of a stream and how many bytes it had in all."""

    def __init__(self) -> None:
        self.data = bytearray()
        self.total = 0

    def add(self, chunk: bytes) -> None:
        self.total += len(chunk)
        self.data += chunk
        del self.data[:-CAPTURE_BYTES]

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
        return _shown_streams(self.stderr, self.stderr_bytes, self.stdout, self.stdout_bytes) or "no output"


def _shown_streams(stderr: str, stderr_bytes: int, stdout: str, stdout_bytes: int) -> str:
    streams = (("stderr", stderr, stderr_bytes), ("stdout", stdout, stdout_bytes))
    return "; ".join(f"{name} {shown_output(text, total)}" for name, text, total in streams if text.strip())


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


async def run_tool(
    argv: Sequence[str], deadline: float, what: str, environment: Mapping[str, str] | None = None
) -> ToolResult:
    """Run ``argv`` until it exits (any status) or ProgrammingTimeout at the loop time ``deadline``;
    ProgrammingError when it cannot be started or its scratch directory made or removed."""
    try:  # by its real path, as /proc shows a working directory
        scratch = await asyncio.to_thread(lambda: os.path.realpath(tempfile.mkdtemp(prefix="fpga-tool-")))
    except OSError as exc:
        raise ProgrammingError(f"{what}: cannot make a scratch directory for {argv[0]}: {exc}") from exc
    try:
        result = await _run_in(argv, deadline, what, {**BASE_ENVIRONMENT, **(environment or {})}, scratch)
    except BaseException:
        left = await asyncio.shield(asyncio.to_thread(_remove_scratch, scratch))
        if left is not None:
            logger.error("%s: cannot remove the tool's scratch directory %s: %s", what, scratch, left)
        raise
    left = await asyncio.shield(asyncio.to_thread(_remove_scratch, scratch))
    if left is not None:
        raise ProgrammingError(f"{what}: cannot remove the tool's scratch directory {scratch}: {left}")
    return result


class _Tool(asyncio.SubprocessProtocol):
    """The end of each stream the tool prints; ``exited``, then ``finished`` once its pipes are closed too."""

    def __init__(self) -> None:
        loop = asyncio.get_running_loop()
        self.out, self.err = _Tail(), _Tail()
        self.exited: asyncio.Future[None] = loop.create_future()
        self.finished: asyncio.Future[None] = loop.create_future()

    def pipe_data_received(self, fd: int, data: bytes | str) -> None:
        (self.out if fd == 1 else self.err).add(data.encode() if isinstance(data, str) else data)

    def process_exited(self) -> None:
        self.exited.set_result(None)

    def connection_lost(self, exc: Exception | None) -> None:
        self.finished.set_result(None)


async def _run_in(argv: Sequence[str], deadline: float, what: str, env: Mapping[str, str], scratch: str) -> ToolResult:
    loop = asyncio.get_running_loop()
    started = time.monotonic()
    try:
        transport, tool = await loop.subprocess_exec(
            _Tool, *argv, stdin=asyncio.subprocess.DEVNULL, env=env, cwd=scratch, start_new_session=True
        )
    except OSError as exc:
        raise ProgrammingError(f"{what}: cannot start {argv[0]}: {exc.strerror or exc}") from exc
    pid = transport.get_pid()
    logger.debug("%s: started %s as process group %d", what, argv[0], pid)
    try:
        async with asyncio.timeout_at(max(deadline, loop.time())):
            await asyncio.shield(tool.exited)
    except BaseException as exc:
        await _reap(transport, tool, scratch)
        if isinstance(exc, TimeoutError):
            output = _shown_streams(tool.err.text(), tool.err.total, tool.out.text(), tool.out.total)
            raise ProgrammingTimeout(
                f"{what}: {argv[0]} did not finish within the deadline; its process group was killed "
                f"(output so far: {output or 'none'})"
            ) from None
        raise
    status = transport.get_returncode()
    assert status is not None
    _kill_group(pid)
    escaped = _kill_escaped(scratch)
    try:
        async with asyncio.timeout(min(DRAIN_AFTER_EXIT_S, max(0.0, deadline - loop.time()))):
            await asyncio.shield(tool.finished)
    except TimeoutError:
        escaped += await asyncio.to_thread(_kill_escaped, scratch, _open_pipes(transport))
        logger.warning(
            "%s: %s exited with status %d; a process that left its group still held its output", what, argv[0], status
        )
    finally:
        transport.close()  # whatever still holds a pipe's other end gets EPIPE
    if escaped:
        logger.warning("%s: %s left %d process(es) outside its group; killed", what, argv[0], escaped)
    out, err = tool.out, tool.err
    return ToolResult(tuple(argv), status, out.text(), err.text(), out.total, err.total, time.monotonic() - started)


def _open_pipes(transport: asyncio.SubprocessTransport) -> list[str]:
    """The tool's output pipes not yet at their end, as /proc names them (what an escaped process holds)."""
    pipes = [transport.get_pipe_transport(fd) for fd in (1, 2)]
    return [
        f"pipe:[{os.fstat(pipe.get_extra_info('pipe').fileno()).st_ino}]"
        for pipe in pipes
        if pipe is not None and not pipe.is_closing()
    ]


def _kill_escaped(scratch: str, pipes: Sequence[str] = ()) -> int:
    """Kill every process working in ``scratch`` or holding one of ``pipes``; how many there were."""
    killed = 0
    try:
        pids = [int(entry) for entry in os.listdir("/proc") if entry.isdigit()]
    except OSError:
        return 0
    for pid in pids:
        if pid != os.getpid() and (_works_in(pid, scratch) or (pipes and _holds(pid, pipes))):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
                killed += 1
    return killed


def _works_in(pid: int, scratch: str) -> bool:
    try:
        cwd = os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        return False
    return cwd == scratch or cwd.startswith(scratch + "/")


def _holds(pid: int, pipes: Sequence[str]) -> bool:
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return False
    for fd in fds:
        with contextlib.suppress(OSError):
            if os.readlink(f"/proc/{pid}/fd/{fd}") in pipes:
                return True
    return False


def _remove_scratch(scratch: str) -> str | None:
    """Remove the scratch directory, killing what still works in it first; why it stays, if it does."""
    left = "not tried"
    for _attempt in range(SCRATCH_REMOVE_ATTEMPTS):
        _kill_escaped(scratch)
        try:
            shutil.rmtree(scratch)
            return None
        except FileNotFoundError:
            return None
        except OSError as exc:
            left = str(exc)
        time.sleep(SCRATCH_REMOVE_PAUSE_S)
    return left


async def _reap(transport: asyncio.SubprocessTransport, tool: _Tool, scratch: str) -> None:
    """Kill the tool's group (and what left it); wait, bounded, until it is gone and its pipes closed."""
    _kill_group(transport.get_pid())
    _kill_escaped(scratch)
    try:
        async with asyncio.timeout(REAP_TIMEOUT_S):
            await asyncio.shield(tool.finished)
    except TimeoutError:
        logger.error("process group %d did not go away within %.0f s of SIGKILL", transport.get_pid(), REAP_TIMEOUT_S)
    finally:
        transport.close()
