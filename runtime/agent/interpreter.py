"""The `python` tool's interpreter: a small REPL server run in the sandbox.

Not part of the agent: the agent only starts it (a Spawn, as the sandbox
user, in /workspace), feeds it and kills it; it lives in the agent's
directory because that is mounted read-only in every sandbox. It runs on
the image's python3 and talks JSON lines: one request `{"code": ...}` per
line on its stdin, one answer per line on its stdout. The code's own
stdin is /dev/null (`input()` gets end of file) and its stdout and stderr
(its children's too) are pipes read here, so nothing it prints can be
taken for an answer.

A cell is compiled with `ast`: when it ends with an expression, that
expression's value is the `result` (its repr) and its rich form (a pandas
DataFrame's HTML and text) goes to `outputs`. Every matplotlib figure open
when the cell ends comes back as a PNG at its size and dpi, then is closed;
the Agg backend is forced before the code can import pyplot, and
`plt.show()` is a no-op under it.

The memory ceiling is RLIMIT_AS, set here before any user code runs (no
cgroup is needed, and gVisor has no OOM killer inside the sandbox): an
allocation past it fails with MemoryError, which ends the interpreter with
an answer saying so (what is left of its state is not to be trusted).

Stdlib only, Python >= 3.9 (runs inside sandboxes).
"""

from __future__ import annotations

import ast
import base64
import io
import json
import linecache
import os
import resource
import signal
import sys
import threading
import time
import traceback
from typing import Any, BinaryIO, Dict, List, Optional

# Kept of each stream per cell: its beginning and its end, the rest counted.
HEAD_BYTES = 1 << 20
TAIL_BYTES = 64 << 10
# Images beyond these are left out (`outputs_dropped` says how many).
MAX_OUTPUTS = 16
MAX_IMAGE_BYTES = 4 << 20


class Answers:
    """The protocol's output: whole JSON lines, from the main thread (answers)
    and the readers (streamed output) alike."""

    def __init__(self, out: BinaryIO) -> None:
        self.out = out
        self.lock = threading.Lock()

    def send(self, message: Dict[str, Any]) -> None:
        line = json.dumps(message, default=repr).encode() + b"\n"
        with self.lock:
            self.out.write(line)
            self.out.flush()


class Stream:
    """One of the code's output pipes, read by a thread of its own."""

    def __init__(self, fd: int, write_fd: int, name: str, answers: Answers) -> None:
        self.fd = fd
        self.name = name
        self.answers = answers
        # Whether the running cell's output is sent as it comes (ExecuteStream).
        self.streaming = False
        # The fd the code writes to (1 or 2): the end mark goes there.
        self.write_fd = write_fd
        self.lock = threading.Lock()
        self.done = threading.Event()
        self.mark = b""
        self.reset(b"")
        threading.Thread(target=self._read, daemon=True).start()

    def reset(self, mark: bytes) -> None:
        with self.lock:
            self.head = bytearray()
            self.tail = bytearray()
            self.total = 0
            self.mark = mark
            self.done.clear()

    def _read(self) -> None:
        while True:
            data = os.read(self.fd, 65536)
            if not data:
                return
            with self.lock:
                self._add(data)
                mark, streaming = self.mark, self.streaming
            if streaming:
                shown = data.replace(mark, b"") if mark else data
                if shown:
                    self.answers.send({"out": self.name, "data": _text(shown)})

    def _add(self, data: bytes) -> None:
        self.total += len(data)
        room = HEAD_BYTES - len(self.head)
        self.head += data[:room]
        self.tail += data[room:] if room > 0 else data
        del self.tail[:-TAIL_BYTES]
        if self.mark and self.mark in bytes(self.head[-len(data) - len(self.mark) :] + self.tail):
            self.done.set()

    def take(self) -> Dict[str, Any]:
        """What the cell wrote, once its end mark has come through."""
        self.done.wait(5.0)
        with self.lock:
            mark, head, tail = self.mark, bytes(self.head), bytes(self.tail)
            total = self.total - len(mark)
        if mark in tail:
            tail = tail.replace(mark, b"")
        else:
            head = head.replace(mark, b"")
        return {"head": _text(head), "tail": _text(tail), "total": max(0, total)}


def _text(data: bytes) -> str:
    return data.decode("utf-8", "replace")


def _limit_memory() -> Optional[int]:
    ceiling = int(os.environ.pop("TOOLRT_INTERPRETER_MEMORY", "0") or 0)
    if ceiling > 0:
        resource.setrlimit(resource.RLIMIT_AS, (ceiling, ceiling))
        return ceiling
    return None


def _children_of(pid: int) -> List[int]:
    """Every descendant of `pid` still attached to it (orphans have left)."""
    parents: Dict[int, int] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
            parents[int(name)] = int(fields[1])
        except (OSError, IndexError, ValueError):
            continue
    found: List[int] = []
    frontier = [pid]
    while frontier:
        parent = frontier.pop()
        kids = [child for child, ppid in parents.items() if ppid == parent]
        found += kids
        frontier += kids
    return found


def _stop_children() -> None:
    """A cell's children belong to it: none outlives it (gone when the answer goes)."""
    killed = _children_of(os.getpid())
    for pid in killed:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    for pid in killed:
        try:
            os.waitpid(pid, 0)  # a child of ours: reaped here
        except ChildProcessError:
            _wait_gone(pid)  # a grandchild: the agent (PID 1) reaps it


def _wait_gone(pid: int) -> None:
    for _ in range(200):
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                if f.read().rsplit(b")", 1)[1].split()[0] in (b"Z", b"X"):
                    return
        except (OSError, IndexError):
            return
        time.sleep(0.005)


def _figures() -> List[Dict[str, str]]:
    """Every open matplotlib figure as a PNG at its own size and dpi, then closed."""
    pyplot = sys.modules.get("matplotlib.pyplot")
    if pyplot is None:
        return []
    shown = []
    for number in pyplot.get_fignums():
        figure = pyplot.figure(number)
        buffer = io.BytesIO()
        figure.savefig(buffer, format="png", dpi=figure.dpi)
        shown.append({"type": "image/png", "data": base64.b64encode(buffer.getvalue()).decode()})
    pyplot.close("all")
    return shown


def _rich(value: Any) -> List[Dict[str, str]]:
    """The displays of a cell's value: its HTML, PNG and JSON forms, when it has them."""
    shown = []
    for method, kind in (
        ("_repr_html_", "text/html"),
        ("_repr_png_", "image/png"),
        ("_repr_json_", "application/json"),
    ):
        render = getattr(value, method, None)
        if not callable(render) or isinstance(value, type):
            continue
        try:
            data = render()
        except Exception:
            continue
        if data is None:
            continue
        if kind == "image/png" and isinstance(data, bytes):
            data = base64.b64encode(data).decode()
        elif kind == "application/json" and not isinstance(data, str):
            data = json.dumps(data, default=repr)
        shown.append({"type": kind, "data": str(data)})
    if any(item["type"] == "text/html" for item in shown):
        # A table as text too, for whoever cannot read HTML.
        shown.append({"type": "text/plain", "data": repr(value)})
    return shown


def _error(exc: BaseException) -> Dict[str, str]:
    lines = traceback.format_exception(type(exc), exc, exc.__traceback__)
    # The frames of this file are the interpreter's, not the model's code.
    kept = [line for line in lines if __file__ not in line]
    return {"name": type(exc).__name__, "message": str(exc), "traceback": "".join(kept)}


class Interpreter:
    def __init__(self, ceiling: Optional[int]) -> None:
        self.ceiling = ceiling
        self.namespace: Dict[str, Any] = {"__name__": "__main__", "__builtins__": __builtins__}
        self.streams: Dict[str, Stream] = {}
        self.cells = 0

    def run(self, code: str, streaming: bool = False) -> Dict[str, Any]:
        self.cells += 1
        mark = f"\0toolrt-cell-{os.getpid()}-{self.cells}\0".encode()
        for stream in self.streams.values():
            stream.reset(mark)
            stream.streaming = streaming
        answer: Dict[str, Any] = {"result": None, "outputs": []}
        signal.signal(signal.SIGINT, signal.default_int_handler)
        try:
            value = self._execute(code, f"<cell {self.cells}>")
            if value is not None:
                answer["result"] = repr(value)
                answer["outputs"] += _rich(value)
        except MemoryError as exc:
            answer["error"] = _error(exc)
            answer["memory"] = True
        except KeyboardInterrupt as exc:
            answer["error"] = _error(exc)
            answer["interrupted"] = True
        except SystemExit as exc:
            answer["exit"] = exc.code if isinstance(exc.code, int) else str(exc.code)
        except BaseException as exc:
            answer["error"] = _error(exc)
        finally:
            signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            answer["outputs"] += _figures()
        except BaseException as exc:
            answer.setdefault("error", _error(exc))
        _stop_children()
        answer["outputs"] = self._within_caps(answer["outputs"], answer)
        for name, stream in self.streams.items():
            target = sys.stdout if name == "stdout" else sys.stderr
            try:
                target.flush()
            except Exception:
                pass
            os.write(stream.write_fd, mark)
            answer[name] = stream.take()
        return answer

    @staticmethod
    def _within_caps(outputs: List[Dict[str, str]], answer: Dict[str, Any]) -> List[Dict[str, str]]:
        kept = [o for o in outputs if len(o["data"]) <= MAX_IMAGE_BYTES * 4 // 3 + 4][:MAX_OUTPUTS]
        if len(kept) < len(outputs):
            answer["outputs_dropped"] = len(outputs) - len(kept)
        return kept

    def _execute(self, code: str, name: str) -> Any:
        # Known to linecache, so tracebacks show the cell's lines.
        linecache.cache[name] = (len(code), None, code.splitlines(True), name)
        tree = ast.parse(code, name, "exec")
        last = None
        tail = tree.body[-1] if tree.body else None
        if isinstance(tail, ast.Expr):
            tree.body.pop()
            last = ast.Expression(tail.value)
        exec(compile(tree, name, "exec"), self.namespace)
        if last is None:
            return None
        value = eval(compile(last, name, "eval"), self.namespace)
        if value is not None:
            self.namespace["_"] = value
        return value


def _serve() -> None:
    ceiling = _limit_memory()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # The protocol keeps the original stdin and stdout; the code gets
    # /dev/null and pipes read here (inherited by its children).
    requests = os.fdopen(os.dup(0), "rb")
    answers = Answers(os.fdopen(os.dup(1), "wb"))
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    interpreter = Interpreter(ceiling)
    for fd, name in ((1, "stdout"), (2, "stderr")):
        read_fd, write_fd = os.pipe()
        os.dup2(write_fd, fd)
        os.close(write_fd)
        interpreter.streams[name] = Stream(read_fd, fd, name, answers)
    sys.stdin = open(os.devnull)
    # The interpreter's own directory is not the code's: it starts in the cwd.
    sys.path[:] = [""] + [p for p in sys.path[1:] if p != os.path.dirname(__file__)]
    os.environ.setdefault("MPLBACKEND", "Agg")
    answers.send({"ready": True, "pid": os.getpid()})
    for line in requests:
        request = json.loads(line)
        answer = interpreter.run(str(request.get("code", "")), bool(request.get("stream")))
        answers.send(answer)
        if "exit" in answer or answer.get("memory"):
            break


if __name__ == "__main__":
    _serve()
