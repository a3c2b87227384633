// toolrt-agent: the static in-sandbox agent, the container's main process.
//
// The same protocol as the Python agent (runtime/agent), the same start:
// root with only SETUID, SETGID and KILL, framed messages on the attached
// stdin/stdout, or (`--channel PATH`, under Docker) on a unix socket it
// dials (channel.go). One binary with no libc dependency, so it runs in any Linux
// image of its architecture, with or without Python. This is its first
// slice: the handshake, commands (exec, cancel, background processes and
// their requests), the file operations resolve, read, write, unlink and
// list, archives both ways, secrets and the egress relay. Every other request is answered
// with an error naming what is missing, never left unanswered.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"sort"
	"sync"
	"syscall"
	"unsafe"

	"toolrt/agent/protocol"
)

const (
	prSetDumpable       = 4
	prSetChildSubreaper = 36
)

// Agent is the state every handler works on.
type Agent struct {
	out    *os.File
	sendMu sync.Mutex
	mu     sync.Mutex // guards epoch, calls and kept
	kept   *kept
	epoch  int64
	calls  map[int64]*Call
	// Running Spawns, by request id (guarded by mu).
	programs map[int64]*program
	in       *os.File
	ch       *channel // the socket the protocol travels on; nil: stdio
	decoder  protocol.Decoder
	decMu    sync.Mutex
	stale    int // bytes still to skip: written before the latest resync
	runner   *Runner
	procs    registry // background processes
	// Archives being packed, by request id (guarded by mu).
	transfers map[int64]*transfer
	// The session's secrets (the Secrets request sets them).
	redactor redactorSlot
	// The next call's shell, started ahead (spares.go).
	spares spareSlot
	// Runaway leftovers stopped, and the notes saying so (healing.go).
	healer *healer
}

// Handler answers one request (in its own goroutine when it may block).
type Handler func(a *Agent, frame *protocol.Frame, request protocol.Message)

// handlers by op; an op of protocol.py missing here is answered as not
// implemented by this agent.
var handlers = map[string]Handler{}

func handle(op string, h Handler) { handlers[op] = h }

func main() {
	// First: it may execute the agent again (timerslack.go).
	commandSlack := slackenTimers()
	// One thread runs Go code: the agent waits far more than it computes,
	// and idle processors looking for work (spinning) cost more CPU than
	// the work itself.
	runtime.GOMAXPROCS(1)
	syscall.Umask(0o022)
	// Not dumpable: the sandbox user cannot ptrace it or read its memory.
	_, _, _ = syscall.RawSyscall(syscall.SYS_PRCTL, prSetDumpable, 0, 0)
	var in, out *os.File
	path := channelPath(os.Args)
	if path != "" {
		nullStdio()
	} else {
		var err error
		if in, out, err = privateProtocolFds(); err != nil {
			fmt.Fprintf(os.Stderr, "toolrt-agent: %v\n", err)
			os.Exit(1)
		}
	}
	if err := confineSelf(); err != nil {
		// Best effort: without it the engine's filter alone holds the agent.
		fmt.Fprintf(os.Stderr, "toolrt-agent: not under its syscall filter: %v\n", err)
	}
	if os.Getpid() != 1 {
		// Outside a container the orphans of commands should still come here.
		_, _, _ = syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 1, 0)
	}
	runner, err := NewRunner()
	if err != nil {
		fmt.Fprintf(os.Stderr, "toolrt-agent: %v\n", err)
		os.Exit(1)
	}
	a := &Agent{in: in, out: out, calls: map[int64]*Call{}, programs: map[int64]*program{}, transfers: map[int64]*transfer{}, runner: runner, kept: newKept(), healer: newHealer()}
	if path != "" {
		a.ch = &channel{path: path}
	}
	runner.relieve = a.relieve
	runner.slack = commandSlack
	reserveThreads(spareThreads)
	a.watchSignals()
	go a.reap()
	go a.watchPressure()
	if a.ch != nil {
		a.serveChannel()
	}
	a.serve(in)
}

// privateProtocolFds moves the protocol off fds 0 and 1 (close-on-exec,
// above 10) and puts /dev/null there, so nothing started later inherits
// the protocol and speaks (or listens) in the agent's name.
func privateProtocolFds() (*os.File, *os.File, error) {
	var fds [2]int
	for i := range fds {
		fd, _, errno := syscall.Syscall(syscall.SYS_FCNTL, uintptr(i), syscall.F_DUPFD_CLOEXEC, 10)
		if errno != 0 {
			return nil, nil, fmt.Errorf("moving the protocol off fd %d: %v", i, errno)
		}
		fds[i] = int(fd)
	}
	nullStdio()
	// Non-blocking: the runtime's poller waits for the daemon's bytes.
	_ = syscall.SetNonblock(fds[0], true)
	return os.NewFile(uintptr(fds[0]), "protocol-in"), os.NewFile(uintptr(fds[1]), "protocol-out"), nil
}

// watchSignals: SIGUSR1 asks for a resync (a new daemon attached, or on
// the channel listens). Every
// other catchable signal a process of the sandbox may send is taken and
// dropped: as PID 1 with a handler, the default (exit, stop) never applies.
// Handled rather than ignored, so that commands start with the defaults.
// The synchronous ones (SEGV, BUS, ...) too: root may send them with kill,
// and Go's runtime crashes on one sent so that no channel takes; a real
// fault still panics (Notify applies only to those sent).
func (a *Agent) watchSignals() {
	resync := make(chan os.Signal, 1)
	signal.Notify(resync, syscall.SIGUSR1)
	dropped := make(chan os.Signal, 16)
	signal.Notify(dropped, syscall.SIGHUP, syscall.SIGINT, syscall.SIGQUIT, syscall.SIGTERM,
		syscall.SIGUSR2, syscall.SIGPIPE, syscall.SIGALRM, syscall.SIGTSTP, syscall.SIGTTIN,
		syscall.SIGTTOU, syscall.SIGXFSZ, syscall.SIGVTALRM, syscall.SIGPROF, syscall.SIGWINCH,
		syscall.SIGSEGV, syscall.SIGBUS, syscall.SIGFPE, syscall.SIGILL, syscall.SIGTRAP,
		syscall.SIGABRT, syscall.SIGSYS, syscall.SIGSTKFLT, syscall.SIGXCPU, syscall.SIGIO,
		syscall.SIGPWR)
	go func() {
		for range dropped {
		}
	}()
	go func() {
		for range resync {
			if a.ch != nil {
				a.redial()
			} else {
				a.resync(a.in)
			}
		}
	}()
}

// serve reads requests until the daemon closes stdin; then the agent ends,
// and the container with it. Each read and its decoding happen under decMu,
// so that a resync (SIGUSR1) falls between two reads: what was read before
// it is dropped with the decoder's buffer, and the bytes already waiting in
// the pipe when it came (an earlier daemon's) are skipped as they are read.
func (a *Agent) serve(in *os.File) {
	raw, err := in.SyscallConn()
	if err != nil {
		fmt.Fprintf(os.Stderr, "toolrt-agent: %v\n", err)
		return
	}
	buf := make([]byte, 1<<20)
	for {
		var frames []*protocol.Frame
		ended := false
		err := raw.Read(func(fd uintptr) bool {
			a.decMu.Lock()
			defer a.decMu.Unlock()
			n, err := syscall.Read(int(fd), buf)
			if err == syscall.EAGAIN || err == syscall.EINTR {
				return false // wait for bytes
			}
			if n <= 0 {
				ended = true
				return true
			}
			data := buf[:n]
			if a.stale > 0 {
				skip := min(a.stale, len(data))
				a.stale -= skip
				data = data[skip:]
			}
			frames = a.feed(data)
			return true
		})
		for _, frame := range frames {
			a.dispatch(frame)
		}
		if ended || err != nil {
			return
		}
	}
}

// feed decodes what arrived on stdin (under decMu).
func (a *Agent) feed(data []byte) []*protocol.Frame {
	return decodeAll(&a.decoder, data)
}

// decodeAll feeds a decoder; a violation's bytes are dropped and what
// followed them is read on.
func decodeAll(decoder *protocol.Decoder, data []byte) []*protocol.Frame {
	var all []*protocol.Frame
	for {
		frames, err := decoder.Feed(data)
		all = append(all, frames...)
		if err == nil {
			return all
		}
		fmt.Fprintf(os.Stderr, "toolrt-agent: %v\n", err)
		data = nil
	}
}

// resync forgets a partial frame and the bytes waiting to be read: a new
// daemon attached, and sends nothing before it reads the Resync frame.
func (a *Agent) resync(in *os.File) {
	a.decMu.Lock()
	a.decoder.Resync()
	if raw, err := in.SyscallConn(); err == nil {
		_ = raw.Control(func(fd uintptr) {
			var pending int32
			_, _, errno := syscall.Syscall(syscall.SYS_IOCTL, fd, syscall.TIOCINQ, uintptr(unsafe.Pointer(&pending)))
			if errno == 0 {
				a.stale = int(pending)
			}
		})
	}
	a.decMu.Unlock()
	m := protocol.NewResync()
	m.Pid = int64(os.Getpid())
	a.sendEpoch(&m, 0, 0, nil)
}

func min(a, b int) int {
	if a < b {
		return a
	}
	return b
}

func (a *Agent) dispatch(frame *protocol.Frame) {
	a.mu.Lock()
	if frame.Op == "hello" {
		a.epoch = frame.Epoch
	} else if frame.Epoch != a.epoch {
		a.mu.Unlock()
		return // written by an earlier daemon: nobody waits for its answer
	}
	a.mu.Unlock()
	h, ok := handlers[frame.Op]
	if !ok {
		if _, known := protocol.New(frame.Op); known {
			a.fail(frame.ID, protocol.InvalidArguments, fmt.Sprintf(
				"the agent does not implement %q", frame.Op))
		} else {
			a.fail(frame.ID, protocol.Internal, fmt.Sprintf("unknown op %q", clip(frame.Op, 40)))
		}
		return
	}
	request, err := frame.Message()
	if err != nil {
		// A field out of the agent's range (a number past 64 bits) is the
		// request's fault, not the agent's.
		a.fail(frame.ID, protocol.InvalidArguments, err.Error())
		return
	}
	h(a, frame, request)
}

// send is one frame to the daemon of the latest hello.
func (a *Agent) send(m protocol.Message, id int64, body []byte) {
	a.mu.Lock()
	epoch := a.epoch
	a.mu.Unlock()
	a.sendEpoch(m, id, epoch, body)
}

func (a *Agent) sendEpoch(m protocol.Message, id, epoch int64, body []byte) {
	frame, err := protocol.Encode(m, id, epoch, body)
	if err != nil {
		// An answer too large for a frame still ends its request, saying so.
		f := protocol.NewFailure()
		f.Message = fmt.Sprintf("the agent's %q answer: %v", m.Op(), err)
		frame, _ = protocol.Encode(&f, id, epoch, nil)
	}
	a.sendMu.Lock()
	defer a.sendMu.Unlock()
	if a.ch != nil {
		a.ch.write(frame)
		return
	}
	_, _ = a.out.Write(frame)
}

func (a *Agent) fail(id int64, code, message string) {
	f := protocol.NewFailure()
	f.Code, f.Message = code, message
	a.send(&f, id, nil)
}

func clip(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

func init() {
	handle("hello", func(a *Agent, frame *protocol.Frame, _ protocol.Message) {
		reply := protocol.NewHelloReply()
		reply.Pid = int64(os.Getpid())
		a.mu.Lock()
		for callID := range a.kept.running {
			reply.Running = append(reply.Running, callID)
		}
		reply.Unacked = a.kept.unacked()
		a.mu.Unlock()
		sort.Strings(reply.Running)
		a.send(&reply, frame.ID, nil)
	})
	handle("ping", func(a *Agent, frame *protocol.Frame, _ protocol.Message) {
		reply := protocol.NewPong()
		a.send(&reply, frame.ID, nil)
	})
}
