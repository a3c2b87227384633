"""The agent protocol: frames and the typed messages they carry.

The one definition of every message and its defaults: the daemon imports
it, and the in-sandbox agent's Go codec (static-agent/protocol) is generated
from it (scripts/gen_agent_protocol.py, held to the same bytes by golden
frames). Nothing else builds or reads these headers.

A frame is MAGIC (4 bytes), two big-endian u32 (header length, body length),
a JSON header, then the raw body, so file contents and output never pass
through JSON escaping. The header holds `op` (the message type), `id` (the
request id, chosen by the daemon and echoed by every frame answering it),
`epoch` (the daemon's attach epoch, echoed by the agent) and the message's
fields.

Every attach starts with a `hello` from the daemon carrying a fresh epoch;
the agent answers with its protocol version, the calls it is still running
and the results it holds unacknowledged (keyed by call id). The magic lets
a decoder that lost its place (half a frame from a daemon that died
mid-write) find the next frame: `Decoder.resync()` drops what it buffered.
A frame whose epoch is not the current one is stale and is dropped.

Archives move in chunks under flow control, in both directions: an Extract
is followed by the daemon's ArchiveChunk frames (the last marked `end`), an
Archive is answered by the agent's; each frame carries the transfer's
request id. The sender starts with a window of `window` chunks and sends
another only for each Credit its receiver grants back as it takes a chunk
in, so neither side ever holds more than a window of a transfer, whatever
the archive's size or the reader's speed.
"""

from __future__ import annotations

import json
import struct
import sys
import typing
from typing import Any, Callable, ClassVar, Dict, List, Optional, Tuple, Type, TypeVar, Union

from . import records

MAGIC = b"TRT1"
PREFIX = struct.Struct(">4sII")
# A frame larger than this is a protocol violation, not a big file: the
# daemon caps file sizes and output far below it.
MAX_HEADER = 1 << 20
MAX_BODY = 256 << 20
# 3: archives stream as ArchiveChunk frames under Credit flow control.
# 4: results kept until acknowledged (Ack), Exec.resume, the Resync frame.
#    A Read may resolve its path itself (Read.resolve, ReadReply.path/failure).
# 5: Exec.spare_env (a spare starts from the session's environment), the
#    stop_leftovers operation (a restore stops every process but the agent),
#    Archive.redact (a snapshot's capture is checked for secrets, not
#    rewritten). An older agent would ignore the new fields silently.
# 6: programs (Spawn with tty, size and user; Resize; stat/read_path/
#    write_path as a user), the python tool's interpreter, process_input.
#    A session whose agent speaks 5 is refused at re-adoption with the reason.
# 7: the static agent's channel: a unix socket it dials (AGENT_SOCKET), opened
#    by a Channel frame (its token) each way, instead of the container's stdio.
# 8: Write.call_id and Write.resume: a write's answer is kept by call id, as
#    a command's, so write_file needs no start record (an older agent would
#    write a resumed call again); Write.exact and WriteReply.resolve_first:
#    a path the daemon checked as asked is written in one trip unless a link
#    is on it.
VERSION = 8

# Error codes the agent answers with (`Failure.code`); the daemon maps them
# to its tool failures in runtime/sandbox/agent_client.py.
NOT_FOUND = "NOT_FOUND"
PATH_DENIED = "PATH_DENIED"
INVALID_ARGUMENTS = "INVALID_ARGUMENTS"
LIMIT_EXCEEDED = "LIMIT_EXCEEDED"
TIMEOUT = "TIMEOUT"
INTERNAL = "INTERNAL"
# A resumed call the agent saw but whose result it no longer keeps.
OUTCOME_UNKNOWN = "OUTCOME_UNKNOWN"
# The program operations (Spawn, Stat, ReadPath, WritePath) answer with the
# reasons their RPCs' clients see (google.rpc.ErrorInfo, DESIGN), passed
# through by the daemon; besides these, TIMEOUT, LIMIT_EXCEEDED and INTERNAL.
FILE_NOT_FOUND = "FILE_NOT_FOUND"
PERMISSION_DENIED = "PERMISSION_DENIED"
IS_A_DIRECTORY = "IS_A_DIRECTORY"
NOT_A_DIRECTORY = "NOT_A_DIRECTORY"
FILE_TOO_LARGE = "FILE_TOO_LARGE"
FILE_EXISTS = "FILE_EXISTS"
NO_SPACE = "NO_SPACE"
INVALID_REQUEST = "INVALID_REQUEST"
USER_NOT_ALLOWED = "USER_NOT_ALLOWED"
# The sandbox's paths and user, as both sides know them.
WORKSPACE = "/workspace"
TMP = "/tmp"
SANDBOX_UID = 1000
SANDBOX_GID = 1000
# The sandbox kernel's limits: bytes in one file name, and in a path with its NUL.
NAME_MAX = 255
PATH_MAX = 4096
# How long a file or archive operation may run unless its request says.
FILE_OP_SECONDS = 60.0
# Archives travel in chunks of at most CHUNK_BYTES, at most WINDOW_CHUNKS of
# them sent and not yet credited back by the receiver.
CHUNK_BYTES = 1 << 20
WINDOW_CHUNKS = 4


class FrameError(ValueError):
    """The peer sent bytes that are not a frame, or a message of the wrong shape."""


# -- messages ----------------------------------------------------------------
# Each message is a dataclass with its wire name in OP. Requests go from the
# daemon to the agent; replies end a request; events stream before the reply.


@records.record
class Message:
    OP: ClassVar[str] = ""


@records.record
class Failure(Message):
    """Ends any request that failed: an agent error code and what went wrong."""

    OP: ClassVar[str] = "error"
    code: str = INTERNAL
    message: str = ""


@records.record
class Hello(Message):
    """First request of every attach: the daemon's epoch and protocol version."""

    OP: ClassVar[str] = "hello"
    version: int = VERSION


@records.record
class HelloReply(Message):
    OP: ClassVar[str] = "hello_reply"
    version: int = VERSION
    python: str = ""
    pid: int = 0
    # Call ids still running, and call ids whose results wait for an ack.
    running: List[str] = records.field(default_factory=list)
    unacked: List[str] = records.field(default_factory=list)


@records.record
class Resync(Message):
    """Sent by the agent on its own (request id 0, epoch 0) when the daemon
    signals it (SIGUSR1) after attaching: the agent dropped whatever partial
    frame a previous daemon left in its decoder, so the next byte it reads
    starts a frame. The daemon sends its Hello only after this."""

    OP: ClassVar[str] = "resync"
    pid: int = 0


@records.record
class Channel(Message):
    """The first frame on the static agent's socket (request id 0, epoch 0),
    never answered. At creation the daemon sends it: the token it keeps
    outside the sandbox. When a new daemon listens again (after a restart)
    the agent sends it back before its Resync, and the daemon takes only the
    connection that presents the token: root in the sandbox may dial the
    socket too, but never saw the token."""

    OP: ClassVar[str] = "channel"
    token: str = ""


@records.record
class Ack(Message):
    """The daemon has stored these calls' results: the agent may forget them.
    Never answered."""

    OP: ClassVar[str] = "ack"
    call_ids: List[str] = records.field(default_factory=list)


@records.record
class Ping(Message):
    OP: ClassVar[str] = "ping"


@records.record
class Pong(Message):
    OP: ClassVar[str] = "pong"


@records.record
class Secrets(Message):
    """The session's secrets, sent once before its first command: the body is
    a JSON object of NAME to value (redact.encode_secrets), so values never
    sit in a header. Answered with Done."""

    OP: ClassVar[str] = "secrets"


@records.record
class Exec(Message):
    """Run a bash command as the sandbox user; the body is its stdin."""

    OP: ClassVar[str] = "exec"
    command: str = ""
    cwd: str = WORKSPACE
    env: Dict[str, str] = records.field(default_factory=dict)
    # The session's own environment, without this call's one-call variables:
    # a shell started ahead for the next call would get this one, so nothing
    # of one call's `env` reaches another (the agent starts no such spare
    # shell for now). None: no spare after it.
    spare_env: Optional[Dict[str, str]] = None
    # The tool call this command answers: its result is kept under this id
    # until the daemon acknowledges it (Ack).
    call_id: str = ""
    # A previous daemon may have started this call: if the agent knows
    # call_id, answer with its kept result (waiting for it if it still
    # runs) instead of running it again.
    resume: bool = False
    timeout_s: float = 60.0
    # Silence longer than this (0 = never) moves the call on per on_idle.
    idle_timeout_s: float = 0.0
    on_idle: str = "background"
    # After an idle move to the background, timeout_s still ends the process
    # (the caller set it); otherwise a process in the background has none.
    deadline_after_idle: bool = False
    # Answer after settle_s with a process handle; no deadline.
    background: bool = False
    settle_s: float = 0.5
    max_background: int = 8
    ring_cap: int = 256 * 1024
    pipefail: bool = False
    merge_output: bool = False
    # Report the shell's final directory (and exports) after the command.
    report_state: bool = False
    report_env: bool = False
    grace_s: float = 0.5
    output_cap: int = 1 << 20
    head_fraction: float = 0.2
    # Stream output as Output events, up to stream_cap bytes.
    stream: bool = False
    stream_cap: int = 8 << 20
    # A background command under a terminal (TTY_ROWS x TTY_COLS) as its
    # controlling terminal, stdin, stdout and stderr (one stream, "stdout");
    # ProcessInput types into it.
    tty: bool = False


@records.record
class Output(Message):
    """An event of a streaming Exec: the body is a chunk of `stream`."""

    OP: ClassVar[str] = "out"
    stream: str = "stdout"


@records.record
class CaptureInfo(Message):
    """How a stream was cut: the body holds head then tail bytes."""

    head: int = 0
    tail: int = 0
    total: int = 0
    dropped_lines: int = 0


@records.record
class ShellReport(Message):
    """What the command's shell left behind: its directory, and its exports."""

    cwd: str = ""
    env: Optional[Dict[str, str]] = None


@records.record
class ProcessInfo(Message):
    process_id: str = ""
    pid: int = 0
    command: str = ""
    state: str = "running"
    exit_code: Optional[int] = None
    runtime_s: float = 0.0
    unread_bytes: int = 0


@records.record
class ExecResult(Message):
    """The end of an Exec. Body: stdout head+tail, then stderr head+tail."""

    OP: ClassVar[str] = "exit"
    call_id: str = ""
    # None while the command still runs (moved to the background).
    exit_code: Optional[int] = None
    # Why the agent killed it: "", "deadline", "idle", "cancelled", "killed".
    killed: str = ""
    idle: bool = False
    oom: bool = False
    background_cap_hit: bool = False
    stdout: CaptureInfo = records.field(default_factory=CaptureInfo)
    stderr: CaptureInfo = records.field(default_factory=CaptureInfo)
    duration_ms: int = 0
    shell_state: Optional[ShellReport] = None
    background: Optional[ProcessInfo] = None
    notes: List[str] = records.field(default_factory=list)


@records.record
class Cancel(Message):
    """Kill what request `target` started."""

    OP: ClassVar[str] = "cancel"
    target: int = 0
    reason: str = "cancelled"


@records.record
class Cancelled(Message):
    OP: ClassVar[str] = "cancelled"


@records.record
class ProcessList(Message):
    OP: ClassVar[str] = "process_list"


@records.record
class ProcessListReply(Message):
    OP: ClassVar[str] = "processes"
    processes: List[ProcessInfo] = records.field(default_factory=list)


@records.record
class ProcessOutput(Message):
    """Unread output of a background process (the reply's body)."""

    OP: ClassVar[str] = "process_output"
    process_id: str = ""


# The window of a background command's terminal: wide, so that a model
# reads lines whole.
TTY_ROWS = 50
TTY_COLS = 200


@records.record
class ProcessInput(Message):
    """Type the body into a background process's terminal; answered with
    InputWritten (what the terminal took now), or NOT_FOUND /
    INVALID_ARGUMENTS (no terminal, or it has ended)."""

    OP: ClassVar[str] = "process_input"
    process_id: str = ""


@records.record
class InputWritten(Message):
    OP: ClassVar[str] = "input_written"
    written: int = 0


@records.record
class ProcessKill(Message):
    OP: ClassVar[str] = "process_kill"
    process_id: str = ""


@records.record
class ProcessReply(Message):
    OP: ClassVar[str] = "process"
    process: ProcessInfo = records.field(default_factory=ProcessInfo)
    dropped_bytes: int = 0
    was_running: bool = True


@records.record
class StopLeftovers(Message):
    """Stop every process of the sandbox but the agent, the running calls'
    and the live background processes' (ProcessKill stops those): what
    commands left behind (`nohup ... &`, setsid'd double forks) and the
    spare shell. Answered with LeftoversStopped."""

    OP: ClassVar[str] = "stop_leftovers"


@records.record
class LeftoversStopped(Message):
    OP: ClassVar[str] = "leftovers_stopped"
    # Processes killed, the spare shell not counted.
    processes: int = 0


@records.record
class Resolve(Message):
    """Resolve paths as the kernel would (symlinks, `..`)."""

    OP: ClassVar[str] = "resolve"
    paths: List[str] = records.field(default_factory=list)


@records.record
class ResolvedPath(Message):
    path: str = ""
    # "file", "dir", "symlink", "other", or "" when nothing is there.
    type: str = ""


@records.record
class Resolved(Message):
    OP: ClassVar[str] = "resolved"
    resolved: List[ResolvedPath] = records.field(default_factory=list)


@records.record
class Read(Message):
    """Lines [offset, offset+limit) of a file, at most max_bytes (the body).

    With `raw`, the whole file, refused past max_bytes.
    """

    OP: ClassVar[str] = "read"
    path: str = ""
    raw: bool = False
    max_bytes: int = 1 << 20
    offset: int = 1
    limit: int = 2000
    deadline_s: float = FILE_OP_SECONDS
    # Replace the session's secrets in the body (off only for edits, which
    # write the content back).
    redact: bool = True
    # Resolve `path` first, as Resolve would, and read what it resolves to:
    # one trip instead of two. The reply names the resolved path, and a
    # failure of the read travels in it rather than ending the request, so
    # that the daemon checks the path against the allowlist before it shows
    # either the content or why there is none.
    resolve: bool = False


@records.record
class ReadReply(Message):
    OP: ClassVar[str] = "content"
    size: int = 0
    # Hard links to the file: another name may be one a deny glob covers.
    links: int = 1
    binary: bool = False
    total_lines: int = 0
    truncated: bool = False
    # With Read.resolve: the path the request resolved to, and why it could
    # not be read (None when it was).
    path: str = ""
    failure: Optional[Failure] = None


@records.record
class Write(Message):
    """Replace a file atomically with the body, creating parent directories."""

    OP: ClassVar[str] = "write"
    path: str = ""
    # As Exec's: the tool call this write answers (its answer is kept under
    # this id until an Ack), and whether a previous daemon may have sent it
    # (then a kept answer comes back instead of writing again).
    call_id: str = ""
    resume: bool = False
    # The path as the daemon checked it, not resolved: written only if no
    # symbolic link is on it (none can be followed then, so what is written
    # is what was checked); with one, nothing is written and the reply says
    # resolve_first (and is not kept under call_id).
    exact: bool = False


@records.record
class WriteReply(Message):
    OP: ClassVar[str] = "written"
    bytes_written: int = 0
    # An exact Write met a symbolic link on its path and wrote nothing: the
    # daemon resolves the path, checks what it resolves to, and writes that.
    resolve_first: bool = False


@records.record
class Unlink(Message):
    OP: ClassVar[str] = "unlink"
    path: str = ""


@records.record
class Done(Message):
    """A request that answers nothing but success."""

    OP: ClassVar[str] = "done"


@records.record
class ListDir(Message):
    OP: ClassVar[str] = "list"
    path: str = WORKSPACE
    recursive: bool = False
    max_entries: int = 1000
    deadline_s: float = FILE_OP_SECONDS


@records.record
class DirEntry(Message):
    path: str = ""
    type: str = ""
    size: int = 0


@records.record
class Listing(Message):
    OP: ClassVar[str] = "listing"
    entries: List[DirEntry] = records.field(default_factory=list)
    truncated: bool = False


@records.record
class Extract(Message):
    """Unpack a tar archive below `dest`, all or nothing, in one pass as it
    arrives: the daemon's ArchiveChunk frames of this request, at most
    `window` of them ahead of the agent's Credits."""

    OP: ClassVar[str] = "extract"
    dest: str = WORKSPACE
    deadline_s: float = FILE_OP_SECONDS
    window: int = WINDOW_CHUNKS
    # A snapshot being restored: once the archive is staged and checked,
    # what `dest` held is removed, and symlinks are kept as they were taken
    # (wherever they point: they are never followed while unpacking).
    restore: bool = False


@records.record
class Archive(Message):
    """Tar `paths`, streamed as ArchiveChunk events, at most `window` of them
    ahead of the daemon's Credits."""

    OP: ClassVar[str] = "archive"
    paths: List[str] = records.field(default_factory=list)
    max_bytes: int = 1 << 34
    deadline_s: float = FILE_OP_SECONDS
    window: int = WINDOW_CHUNKS
    # Replace the session's secrets in text files (off for snapshots: the
    # daemon refuses one holding a secret rather than store rewritten files).
    redact: bool = True


@records.record
class ArchiveChunk(Message):
    """A piece of a transfer's archive (the body, at most CHUNK_BYTES): from
    the agent for an Archive, from the daemon for an Extract (`end` on the
    last one, which may be empty)."""

    OP: ClassVar[str] = "data"
    end: bool = False


@records.record
class Credit(Message):
    """Room for `chunks` more ArchiveChunks of the transfer, granted by the side
    that receives them as it takes chunks in."""

    OP: ClassVar[str] = "credit"
    chunks: int = 1


@records.record
class Transferred(Message):
    """The end of an Extract or Archive: what it moved."""

    OP: ClassVar[str] = "transferred"
    files: int = 0
    bytes: int = 0


# Network egress: commands reach the daemon's proxy at 127.0.0.1:RELAY_PORT,
# which the agent relays to the unix socket in the directory the daemon
# bind-mounts at RELAY_DIR (root's only: the sandbox user cannot open it).
RELAY_PORT = 3128
RELAY_DIR = "/opt/toolrt/egress"
RELAY_SOCKET = RELAY_DIR + "/proxy.sock"
# The static agent's protocol socket in the same directory (Channel): unlike
# the container's stdio, a socket cannot be reopened through /proc/1/fd.
AGENT_SOCKET = RELAY_DIR + "/agent.sock"


@records.record
class RelayStart(Message):
    """Listen on 127.0.0.1:port and relay each connection to the unix socket;
    idempotent while the relay runs."""

    OP: ClassVar[str] = "relay_start"
    socket: str = RELAY_SOCKET
    port: int = RELAY_PORT


@records.record
class RelayReady(Message):
    OP: ClassVar[str] = "relay_ready"
    port: int = RELAY_PORT


# -- programs: a process with bytes in and out, files anywhere ----------------
# What harnesses and SDKs use (the Exec, ReadFile, WriteFile and StatPath
# RPCs), as the sandbox user, wherever that user may reach: no allowlist.


@records.record
class Spawn(Message):
    """Run a program as the sandbox user. The body is its argv, each argument
    followed by a NUL byte (argv[0] without a slash is looked up in env's
    PATH). The agent answers with a Spawned event once the program runs (or
    a Failure: FILE_NOT_FOUND, PERMISSION_DENIED, NOT_A_DIRECTORY for it or
    the cwd), streams its Output as it comes (within output_window), and
    ends with a SpawnExit. Credits go both ways on its request id: the
    agent's for Stdin events, the daemon's for Output events."""

    OP: ClassVar[str] = "spawn"
    cwd: str = WORKSPACE
    # Who runs it: "" for the sandbox user, else a name or uid of the
    # sandbox's /etc/passwd (USER_NOT_ALLOWED when it has none). Root gets
    # ROOT_CAPABILITIES when `capabilities`, else none.
    user: str = ""
    capabilities: bool = False
    env: Dict[str, str] = records.field(default_factory=dict)
    # The whole tree is killed after timeout_s (TERM, then KILL after grace_s).
    timeout_s: float = 60.0
    grace_s: float = 0.5
    # Stdin events feed the program's stdin (else it reads /dev/null); the
    # agent grants a Credit for each one written, `window` at most ahead.
    stdin_open: bool = False
    window: int = WINDOW_CHUNKS
    # Output bytes per stream sent as Output events; the rest is counted.
    output_cap: int = 16 << 20
    # Output events sent and not yet credited back by the daemon (a Credit
    # per event it passed on): past them the agent stops reading the
    # program's output, which then waits in its pipes.
    output_window: int = 16
    # A terminal: a pseudo-terminal of rows x cols (0: left as the kernel
    # makes it) is the program's controlling terminal, stdin, stdout and
    # stderr; its output all arrives as "stdout", and Stdin types into it.
    tty: bool = False
    rows: int = 0
    cols: int = 0


@records.record
class Spawned(Message):
    """A Spawn's program runs (its exec succeeded): its pid in the sandbox."""

    OP: ClassVar[str] = "spawned"
    pid: int = 0


@records.record
class Stdin(Message):
    """Bytes for a running Spawn's stdin (the body); `eof` closes it after them."""

    OP: ClassVar[str] = "stdin"
    eof: bool = False


# The signals a Signal may name (without "SIG").
SIGNAL_NAMES = ("HUP", "INT", "QUIT", "KILL", "USR1", "USR2", "TERM", "CONT", "STOP", "TSTP")


@records.record
class Signal(Message):
    """Send a signal (a name such as "INT", "TERM", "KILL") to a running
    Spawn's process group (under a terminal: the terminal's foreground
    process group, as a key typed there would). Never answered."""

    OP: ClassVar[str] = "signal"
    signal: str = "TERM"


@records.record
class Resize(Message):
    """A running Spawn's terminal is now rows x cols (its foreground
    programs get SIGWINCH). Never answered; ignored without a terminal."""

    OP: ClassVar[str] = "resize"
    rows: int = 0
    cols: int = 0


# What a running Spawn's client sends it after the start.
ProgramInput = Union[Stdin, Signal, Resize]


@records.record
class SpawnExit(Message):
    """The end of a Spawn."""

    OP: ClassVar[str] = "spawn_exit"
    # 128 + n for a program ended by signal n, whose name is `signal`.
    exit_code: int = 0
    signal: str = ""
    # Why the agent killed it: "", "deadline", "cancelled", "aborted".
    killed: str = ""
    oom: bool = False
    # Output past output_cap, per stream, not sent.
    stdout_dropped: int = 0
    stderr_dropped: int = 0


@records.record
class Stat(Message):
    """What is at `path` (not following a final symlink)."""

    OP: ClassVar[str] = "stat"
    path: str = ""
    # As in Spawn.
    user: str = ""
    capabilities: bool = False
    deadline_s: float = FILE_OP_SECONDS


@records.record
class StatReply(Message):
    OP: ClassVar[str] = "stat_reply"
    exists: bool = False
    # "file", "directory", "symlink", "other"; "" when nothing is there.
    type: str = ""
    size: int = 0
    mode: int = 0
    mtime: float = 0.0
    link_target: str = ""


@records.record
class ReadPath(Message):
    """A file's bytes from `offset`, streamed as ArchiveChunk events under
    Credits (as an Archive's), ended by Transferred. More than max_bytes is
    FILE_TOO_LARGE, never a cut: a special file (a FIFO, a device, a /proc
    entry) is read to its end, at most max_bytes, before a byte is sent, and
    waits at most wait_s for its bytes (TIMEOUT)."""

    OP: ClassVar[str] = "read_path"
    path: str = ""
    # As in Spawn.
    user: str = ""
    capabilities: bool = False
    offset: int = 0
    max_bytes: int = 1 << 30
    wait_s: float = 10.0
    deadline_s: float = FILE_OP_SECONDS
    window: int = WINDOW_CHUNKS


@records.record
class WritePath(Message):
    """Write the daemon's ArchiveChunk events (as an Extract's) to `path`,
    opened as the sandbox user: an existing file keeps its inode, owner and
    mode; `mode` applies to a file this creates. `if_exists`: "replace"
    (truncate), "fail" (FILE_EXISTS) or "append". Ended by Transferred."""

    OP: ClassVar[str] = "write_path"
    path: str = ""
    # As in Spawn.
    user: str = ""
    capabilities: bool = False
    mode: int = 0o644
    make_parents: bool = False
    if_exists: str = "replace"
    deadline_s: float = FILE_OP_SECONDS
    window: int = WINDOW_CHUNKS


REQUESTS: Tuple[Type[Message], ...] = (
    Hello,
    Ack,
    Ping,
    Secrets,
    Exec,
    Cancel,
    ProcessList,
    ProcessOutput,
    ProcessInput,
    ProcessKill,
    StopLeftovers,
    Resolve,
    Read,
    Write,
    Unlink,
    ListDir,
    Extract,
    Archive,
    RelayStart,
    Spawn,
    Stat,
    ReadPath,
    WritePath,
)
REPLIES: Tuple[Type[Message], ...] = (
    Failure,
    Resync,
    Channel,
    HelloReply,
    Pong,
    ExecResult,
    Cancelled,
    ProcessListReply,
    ProcessReply,
    InputWritten,
    LeftoversStopped,
    Resolved,
    ReadReply,
    WriteReply,
    Done,
    Listing,
    Transferred,
    RelayReady,
    SpawnExit,
    StatReply,
)
# Frames of a running request before its reply; a transfer's chunks and
# credits go both ways, as do a Spawn's (stdin and signals in, output out).
EVENTS: Tuple[Type[Message], ...] = (
    Output,
    ArchiveChunk,
    Credit,
    Spawned,
    Stdin,
    Signal,
    Resize,
)
BY_OP: Dict[str, Type[Message]] = {m.OP: m for m in REQUESTS + REPLIES + EVENTS}

M = TypeVar("M", bound=Message)


# -- conversion --------------------------------------------------------------
# Every frame is converted both ways on both sides: each message class gets
# its plan (field names, one converter per field, built from its type hints)
# once, instead of reading the hints and their typing origins per field and
# per frame.
Convert = Callable[[Any, str], Any]
_SCALARS = frozenset((str, int, float, bool, type(None)))
_NAMES: Dict[type, Tuple[str, ...]] = {}
_PLANS: Dict[type, Tuple[Tuple[str, Convert, str], ...]] = {}


def _names(cls: type) -> Tuple[str, ...]:
    names = _NAMES.get(cls)
    if names is None:
        names = _NAMES[cls] = records.fields(cls)
    return names


def to_dict(message: Message) -> Dict[str, Any]:
    """The message's fields as plain JSON values (nested messages as objects)."""
    out = {}
    for name in _names(type(message)):
        value = getattr(message, name)
        out[name] = value if type(value) in _SCALARS else _plain(value)
    return out


def _plain(value: Any) -> Any:
    if isinstance(value, Message):
        return to_dict(value)
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _plan(cls: type) -> Tuple[Tuple[str, Convert, str], ...]:
    plan = _PLANS.get(cls)
    if plan is None:
        module = sys.modules[cls.__module__].__dict__
        hints = typing.get_type_hints(cls, module)
        plan = tuple(
            (name, _converter(hints[name]), f"{cls.__name__}.{name}") for name in _names(cls)
        )
        _PLANS[cls] = plan
    return plan


def from_dict(cls: Type[M], data: Any) -> M:
    """A `cls` from JSON data; absent fields take their defaults, and a value
    of the wrong type is a FrameError, never a half-built message."""
    if not isinstance(data, dict):
        msg = f"{cls.__name__}: expected an object, got {type(data).__name__}"
        raise FrameError(msg)
    values = {}
    for name, convert, where in _plan(cls):
        if name in data:
            values[name] = convert(data[name], where)
    return cls(**values)


def _converter(tp: Any) -> Convert:
    """What checks (and converts) a JSON value for a field of type `tp`."""
    origin = typing.get_origin(tp)
    if origin is typing.Union:
        options = typing.get_args(tp)
        [inner] = [o for o in options if o is not type(None)]
        convert = _converter(inner)
        if type(None) not in options:
            return convert
        return lambda value, where: None if value is None else convert(value, where)
    if origin is list:
        (item,) = typing.get_args(tp)
        each = _converter(item)

        def listed(value: Any, where: str) -> Any:
            if not isinstance(value, list):
                msg = f"{where}: expected a list"
                raise FrameError(msg)
            return [each(v, where) for v in value]

        return listed
    if origin is dict:
        _, item = typing.get_args(tp)
        each = _converter(item)

        def mapped(value: Any, where: str) -> Any:
            if not isinstance(value, dict):
                msg = f"{where}: expected an object"
                raise FrameError(msg)
            return {str(k): each(v, where) for k, v in value.items()}

        return mapped
    if tp is Any:
        return lambda value, where: value
    if isinstance(tp, type) and issubclass(tp, Message):
        return lambda value, where: from_dict(tp, value)
    return _scalar(tp)


def _scalar(tp: type) -> Convert:
    def scalar(value: Any, where: str) -> Any:
        if type(value) is tp:
            return value
        if tp is float and isinstance(value, int) and not isinstance(value, bool):
            return float(value)
        if (tp is int and isinstance(value, bool)) or not isinstance(value, tp):
            msg = f"{where}: expected {tp.__name__}, got {type(value).__name__}"
            raise FrameError(msg)
        return value

    return scalar


# -- frames ------------------------------------------------------------------
def encode(message: Message, request_id: int, epoch: int, body: bytes = b"") -> bytes:
    """One frame: `message` answering (or being) request `request_id`."""
    header = to_dict(message)
    header["op"] = message.OP
    header["id"] = request_id
    header["epoch"] = epoch
    # ASCII JSON: a lone surrogate in a string travels as an escape, not as
    # bytes that are not UTF-8.
    raw = json.dumps(header, separators=(",", ":")).encode("ascii")
    if len(raw) > MAX_HEADER or len(body) > MAX_BODY:
        msg = f"frame too large: header {len(raw)} bytes, body {len(body)} bytes"
        raise FrameError(msg)
    return PREFIX.pack(MAGIC, len(raw), len(body)) + raw + body


class Frame:
    """A decoded frame: its op, request id, epoch, raw header and body."""

    __slots__ = ("op", "request_id", "epoch", "header", "body")

    def __init__(self, header: Dict[str, Any], body: bytes) -> None:
        op, rid, epoch = header.get("op"), header.get("id"), header.get("epoch", 0)
        if not isinstance(op, str) or not isinstance(rid, int) or not isinstance(epoch, int):
            msg = "frame header lacks a string op, an integer id or an integer epoch"
            raise FrameError(msg)
        self.op = op
        self.request_id = rid
        self.epoch = epoch
        self.header = header
        self.body = body

    def message(self) -> Message:
        """The typed message of this frame (FrameError for an unknown op)."""
        cls = BY_OP.get(self.op)
        if cls is None:
            msg = f"unknown op {self.op[:40]!r}"
            raise FrameError(msg)
        return from_dict(cls, self.header)

    def as_type(self, cls: Type[M]) -> M:
        if self.op != cls.OP:
            msg = f"expected a {cls.OP!r} frame, got {self.op[:40]!r}"
            raise FrameError(msg)
        return from_dict(cls, self.header)


class Decoder:
    """Incremental frame decoder: feed bytes, get complete frames.

    Bytes before a frame's MAGIC are skipped (and counted in `skipped`), so
    after `resync()` the decoder picks up at the next frame that starts.
    """

    def __init__(self) -> None:
        self._buf = bytearray()
        self._need: Optional[Tuple[int, int]] = None
        self.skipped = 0

    def resync(self) -> None:
        """Forget a partial frame (its writer is gone); look for the next MAGIC."""
        self.skipped += len(self._buf)
        self._buf.clear()
        self._need = None

    def feed(self, data: bytes) -> List[Frame]:
        self._buf += data
        frames: List[Frame] = []
        while True:
            if self._need is None:
                if not self._find_magic() or len(self._buf) < PREFIX.size:
                    break
                _, hlen, blen = PREFIX.unpack_from(self._buf)
                if hlen > MAX_HEADER or blen > MAX_BODY:
                    msg = f"frame too large: header {hlen} bytes, body {blen} bytes"
                    raise FrameError(msg)
                self._need = (hlen, blen)
                del self._buf[: PREFIX.size]
            hlen, blen = self._need
            if len(self._buf) < hlen + blen:
                break
            raw = bytes(self._buf[:hlen])
            body = bytes(self._buf[hlen : hlen + blen])
            del self._buf[: hlen + blen]
            self._need = None
            try:
                header = json.loads(raw.decode("utf-8"))
            except ValueError as exc:
                msg = f"frame header is not JSON: {exc}"
                raise FrameError(msg) from None
            if not isinstance(header, dict):
                msg = "frame header is not a JSON object"
                raise FrameError(msg)
            frames.append(Frame(header, body))
        return frames

    def _find_magic(self) -> bool:
        """Drop bytes before the next MAGIC; False when none is buffered yet."""
        at = self._buf.find(MAGIC)
        if at < 0:
            # Keep a tail that may be the start of a MAGIC still arriving.
            keep = len(MAGIC) - 1
            drop = max(0, len(self._buf) - keep)
            self.skipped += drop
            del self._buf[:drop]
            return False
        self.skipped += at
        del self._buf[:at]
        return True
