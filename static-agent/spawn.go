package main

// Programs: a Spawn runs an argv rather than a shell line (the Exec RPC,
// the python tool's interpreter). It
// starts through the same launcher as a command, as the user it names (the
// sandbox user unless it names another, users.go) in a call group of its own, so its deadline and a Cancel kill its whole tree
// as a command's do (await, kill). What differs:
//
//   - Spawned goes out once the launcher's report pipe closes empty (the
//     exec succeeded); a failed exec is a Failure whose code is the reason
//     the client sees (FILE_NOT_FOUND, PERMISSION_DENIED...), before anything;
//   - Stdin events feed its stdin as the pipe takes them, a Credit back for
//     each one written, so the agent holds at most a window of them;
//   - its output goes out as Output events as it is read (redacted), up to a
//     cap per stream, the rest counted; past output_window events the daemon
//     has not credited back its pipes are not read, so a slow client holds
//     the program back rather than filling anyone's memory;
//   - Signal events reach its process group;
//   - with tty, a pseudo-terminal (terminal.go) is its controlling terminal,
//     stdin, stdout and stderr (one stream, "stdout"): Stdin types into it,
//     Resize sets its window, a Signal goes to its foreground process group
//     as a key would.
//
// No shell state, no kept answer: a program's only listener is the RPC that
// started it, and a restore's stop_leftovers ends it.

import (
	"fmt"
	"os"
	"strings"
	"sync"
	"syscall"

	"toolrt/agent/protocol"
)

// program is one running Spawn.
type program struct {
	call    *Call
	request *protocol.Spawn
	argv    []string
	mu      sync.Mutex // guards what follows
	ready   *sync.Cond
	// Output events the daemon has room for; once the main process has
	// ended, what is left in the pipes is taken whatever the credits.
	credits int64
	ended   bool
	pid     int // its main process's, once started (0 before)
	// Its stdin: the pipe once started, the chunks waiting for it, whether
	// the daemon closed it (eof) and whether it is closed for good.
	input       *os.File
	pending     [][]byte
	eof         bool
	inputClosed bool
	// Per stream (stdout, stderr): bytes it may still send, bytes dropped.
	room    [2]int64
	dropped [2]int64
}

// signalNumbers are the signals a client may send (protocol.SIGNAL_NAMES).
var signalNumbers = map[string]syscall.Signal{
	"HUP": syscall.SIGHUP, "INT": syscall.SIGINT, "QUIT": syscall.SIGQUIT,
	"KILL": syscall.SIGKILL, "USR1": syscall.SIGUSR1, "USR2": syscall.SIGUSR2,
	"TERM": syscall.SIGTERM, "CONT": syscall.SIGCONT, "STOP": syscall.SIGSTOP,
	"TSTP": syscall.SIGTSTP,
}

// signalNames is Python's signal.Signals(n).name without "SIG".
var signalNames = map[syscall.Signal]string{
	1: "HUP", 2: "INT", 3: "QUIT", 4: "ILL", 5: "TRAP", 6: "ABRT", 7: "BUS", 8: "FPE",
	9: "KILL", 10: "USR1", 11: "SEGV", 12: "USR2", 13: "PIPE", 14: "ALRM", 15: "TERM",
	16: "STKFLT", 17: "CHLD", 18: "CONT", 19: "STOP", 20: "TSTP", 21: "TTIN", 22: "TTOU",
	23: "URG", 24: "XCPU", 25: "XFSZ", 26: "VTALRM", 27: "PROF", 28: "WINCH", 29: "IO",
	30: "PWR", 31: "SYS", 34: "RTMIN", 64: "RTMAX",
}

func signalName(sig syscall.Signal) string {
	if name, ok := signalNames[sig]; ok {
		return name
	}
	return fmt.Sprintf("RTMIN+%d", int(sig)-34)
}

func init() {
	handle("spawn", func(a *Agent, frame *protocol.Frame, m protocol.Message) {
		request := m.(*protocol.Spawn)
		argv := decodeArgv(frame.Body)
		if len(argv) == 0 || argv[0] == "" {
			a.fail(frame.ID, protocol.InvalidRequest, "argv is empty: name a program to run")
			return
		}
		user, err := resolveUser(request.User, request.Capabilities)
		if err != nil {
			a.send(failureOf(err), frame.ID, nil)
			return
		}
		// What the call machinery reads of a request: where, how long, how gently.
		exec := protocol.NewExec()
		exec.Cwd, exec.Env, exec.TimeoutS, exec.GraceS = request.Cwd, request.Env, request.TimeoutS, request.GraceS
		p := &program{
			call: &Call{id: frame.ID, epoch: frame.Epoch, request: &exec, stop: make(chan string, 1),
				output: make(chan struct{}, 1), redactor: a.redactor.get(), user: &user},
			request:     request,
			argv:        argv,
			credits:     max64(1, request.OutputWindow),
			inputClosed: !request.StdinOpen && !request.Tty, // a terminal is always typed into
			room:        [2]int64{max64(0, request.OutputCap), max64(0, request.OutputCap)},
		}
		p.ready = sync.NewCond(&p.mu)
		// Known before the next frame is dispatched: its Stdin events find it.
		a.mu.Lock()
		a.programs[frame.ID] = p
		a.mu.Unlock()
		go a.runProgram(p)
	})
	handle("stdin", func(a *Agent, frame *protocol.Frame, m protocol.Message) {
		p := a.programOf(frame.ID)
		if p == nil || !p.feed(frame.Body, m.(*protocol.Stdin).Eof) {
			if len(frame.Body) > 0 {
				// Its program is gone: the credit still comes back, nothing waits for it.
				a.credit(frame.ID, frame.Epoch, 1)
			}
		}
	})
	// A terminal's new size; without a terminal it is ignored.
	handle("resize", func(a *Agent, frame *protocol.Frame, m protocol.Message) {
		if p := a.programOf(frame.ID); p != nil {
			resize := m.(*protocol.Resize)
			p.mu.Lock()
			keys := p.call.terminal
			p.mu.Unlock()
			keys.resize(max64(0, resize.Rows), max64(0, resize.Cols))
		}
	})
	handle("signal", func(a *Agent, frame *protocol.Frame, m protocol.Message) {
		p := a.programOf(frame.ID)
		sig, known := signalNumbers[strings.ToUpper(m.(*protocol.Signal).Signal)]
		if p == nil || !known {
			return
		}
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.pid == 0 || p.ended {
			return // not started yet, or its pid is no longer its own
		}
		// The launcher made it a process group's leader (setsid); under a
		// terminal, whatever runs in its foreground (a shell's job).
		group := p.call.terminal.foreground()
		if group <= 0 {
			group = p.pid
		}
		if syscall.Kill(-group, sig) != nil {
			_ = syscall.Kill(p.pid, sig)
		}
	})
}

func max64(a, b int64) int64 {
	if a > b {
		return a
	}
	return b
}

// decodeArgv is a Spawn's body: each argument followed by a NUL byte.
func decodeArgv(body []byte) []string {
	if len(body) == 0 || body[len(body)-1] != 0 {
		return nil
	}
	return strings.Split(string(body[:len(body)-1]), "\x00")
}

func (a *Agent) programOf(id int64) *program {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.programs[id]
}

func (a *Agent) credit(id, epoch int64, chunks int) {
	c := protocol.NewCredit()
	c.Chunks = int64(chunks)
	a.sendEpoch(&c, id, epoch, nil)
}

// runProgram starts the program, streams it and answers its end.
func (a *Agent) runProgram(p *program) {
	call := p.call
	defer func() {
		a.mu.Lock()
		delete(a.programs, call.id)
		a.mu.Unlock()
	}()
	answer := func(m protocol.Message) {
		p.closeInput(a) // the credits for what it never read go first
		p.call.terminal.close()
		a.sendEpoch(m, call.id, call.epoch, nil)
	}
	oomBefore, oomKnown := oomKills()
	started, err := a.launchProgram(p)
	if err != nil {
		errno, _ := underlyingErrno(err)
		f := protocol.NewFailure()
		f.Code, f.Message = failureOfSpawn(stageSetup, errno, "")
		answer(&f)
		return
	}
	if failure := started.failure(p); failure != nil {
		<-started.exit
		started.closeOutput()
		answer(failure)
		return
	}
	p.mu.Lock()
	p.pid = call.pid
	p.mu.Unlock()
	spawned := protocol.NewSpawned()
	spawned.Pid = int64(call.pid)
	a.sendEpoch(&spawned, call.id, call.epoch, nil)
	go p.writeInput(a)
	for _, s := range started.streams {
		s.start(a, call)
	}
	out := a.await(call, started.exit)
	p.mu.Lock()
	p.ended = true
	p.mu.Unlock()
	p.ready.Broadcast()
	for _, s := range started.streams {
		s.cut()
	}
	reply := protocol.NewSpawnExit()
	reply.ExitCode = int64(exitCode(out.status))
	if out.status.Signaled() {
		reply.Signal = signalName(out.status.Signal())
	}
	reply.Killed = out.reason
	if oomAfter, ok := oomKills(); ok && oomKnown && oomAfter > oomBefore {
		reply.Oom = true
	}
	reply.StdoutDropped, reply.StderrDropped = p.dropped[0], p.dropped[1]
	answer(&reply)
}

// startedProgram is a launched program's descriptors and exit.
type startedProgram struct {
	streams []*stream // stdout and stderr, or its terminal's one
	report  *os.File
	exit    chan syscall.WaitStatus
}

func (s *startedProgram) closeOutput() {
	for _, st := range s.streams {
		_ = st.file.Close()
	}
}

// launchProgram starts the launcher with the program's pipes, or its
// terminal.
func (a *Agent) launchProgram(p *program) (*startedProgram, error) {
	var ours, theirs []int
	defer func() {
		for _, fd := range theirs {
			_ = syscall.Close(fd)
		}
	}()
	fail := func(err error) (*startedProgram, error) {
		for _, fd := range ours {
			_ = syscall.Close(fd)
		}
		p.call.terminal.close()
		return nil, err
	}
	pipe := func() (int, int, error) {
		var fds [2]int
		if err := syscall.Pipe2(fds[:], syscall.O_CLOEXEC); err != nil {
			return -1, -1, err
		}
		ours, theirs = append(ours, fds[0]), append(theirs, fds[1])
		return fds[0], fds[1], nil
	}
	reportR, reportW, err := pipe()
	if err != nil {
		return fail(err)
	}
	// Read from outputs (named by names), written to input (-1: none).
	var outputs []int
	names := []string{"stdout", "stderr"}
	input := -1
	var files []uintptr
	if p.request.Tty {
		// One terminal for all three: read on its master, typed into on a
		// copy of it, resized and asked for its foreground on another.
		master, slave, err := openTerminal(p.request.Rows, p.request.Cols)
		if err != nil {
			return fail(err)
		}
		ours, theirs = append(ours, master), append(theirs, slave)
		keys, err := newKeyboard(master)
		if err != nil {
			return fail(err)
		}
		p.mu.Lock() // the resize handler reads it
		p.call.terminal = keys
		p.mu.Unlock()
		if input, err = dupCloexec(master); err != nil {
			return fail(err)
		}
		ours = append(ours, input)
		outputs, names = []int{master}, names[:1]
		files = []uintptr{uintptr(slave), uintptr(slave), uintptr(slave), uintptr(reportW)}
	} else {
		outR, outW, err := pipe()
		if err != nil {
			return fail(err)
		}
		errR, errW, err := pipe()
		if err != nil {
			return fail(err)
		}
		var stdin int
		if p.request.StdinOpen {
			var fds [2]int
			err = syscall.Pipe2(fds[:], syscall.O_CLOEXEC)
			stdin, input = fds[0], fds[1]
		} else {
			stdin, err = syscall.Open(os.DevNull, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
		}
		if err != nil {
			return fail(err)
		}
		theirs = append(theirs, stdin)
		if input >= 0 {
			ours = append(ours, input)
		}
		outputs = []int{outR, errR}
		files = []uintptr{uintptr(stdin), uintptr(outW), uintptr(errW), uintptr(reportW)}
	}
	// Leftovers of earlier calls must not leave this program without room.
	a.relieve(pressure())
	exit, err := a.runner.launch(p.call, p.argv, files, nil)
	if err != nil {
		return fail(err)
	}
	started := &startedProgram{report: os.NewFile(uintptr(reportR), "report"), exit: exit}
	for i, fd := range outputs {
		s := newStream(fd, names[i], p.call.request, p.call.redactor)
		s.capture = newCapture(0, 0)
		s.forward = p.forwarder(a, i, names[i])
		started.streams = append(started.streams, s)
	}
	if input >= 0 {
		// Non-blocking, so that closing it ends a write still waiting.
		_ = syscall.SetNonblock(input, true)
		p.mu.Lock()
		p.input = os.NewFile(uintptr(input), "stdin")
		p.mu.Unlock()
	}
	return started, nil
}

// failure is the Failure of a program whose exec failed, or nil once the
// launcher's report pipe closed empty (the program runs).
func (s *startedProgram) failure(p *program) *protocol.Failure {
	return launcherReport(s.report, "program", func(stage int32, errno syscall.Errno) (string, string) {
		return execFailure(p, stage, errno)
	})
}

// execFailure is programs.exec_failure: (reason, message) for a program
// that could not start.
func execFailure(p *program, stage int32, errno syscall.Errno) (string, string) {
	var what string
	missing := protocol.FileNotFound
	switch stage {
	case stageCwd:
		what, missing = "cwd "+clip(p.request.Cwd, 300), protocol.NotADirectory
	case stageExec:
		what = p.argv[0]
		if len(what) > 300 {
			what = what[:300]
		}
	default:
		return failureOfSpawn(stage, errno, p.request.Cwd)
	}
	reason := protocol.Internal
	switch errno {
	case syscall.ENOENT, syscall.ELOOP:
		reason = protocol.FileNotFound
	case syscall.EACCES, syscall.EPERM:
		reason = protocol.PermissionDenied
	case syscall.E2BIG, syscall.ENAMETOOLONG:
		reason = protocol.InvalidRequest
	case syscall.EAGAIN, syscall.ENOMEM:
		reason = protocol.LimitExceeded
	case syscall.ENOTDIR:
		reason = missing
	}
	return reason, fmt.Sprintf("%s: %s", what, strerror(errno))
}

// forwarder sends stream i's (redacted) output on as Output events, within
// its cap and the daemon's credits.
func (p *program) forwarder(a *Agent, i int, name string) func([]byte) {
	return func(data []byte) {
		chunk := data
		if int64(len(chunk)) > p.room[i] {
			chunk = chunk[:p.room[i]]
		}
		p.room[i] -= int64(len(chunk))
		p.dropped[i] += int64(len(data) - len(chunk))
		if len(chunk) == 0 {
			return
		}
		event := protocol.NewOutput()
		event.Stream = name
		a.sendEpoch(&event, p.call.id, p.call.epoch, chunk)
		p.mu.Lock()
		p.credits--
		for p.credits <= 0 && !p.ended {
			p.ready.Wait() // its pipes wait meanwhile: the program is held back
		}
		p.mu.Unlock()
	}
}

// grant is the daemon's Credit for Output events it passed on.
func (p *program) grant(chunks int64) {
	p.mu.Lock()
	p.credits += max64(0, chunks)
	p.mu.Unlock()
	p.ready.Broadcast()
}

// feed queues a Stdin event's bytes; false when its stdin is closed.
func (p *program) feed(data []byte, eof bool) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.inputClosed {
		return false
	}
	if len(data) > 0 {
		p.pending = append(p.pending, data)
	}
	p.eof = p.eof || eof
	p.ready.Broadcast()
	return true
}

// writeInput writes the queued stdin chunks, a Credit for each, and closes
// it after the daemon's eof (or once the program stops reading).
func (p *program) writeInput(a *Agent) {
	for {
		p.mu.Lock()
		for len(p.pending) == 0 && !p.eof && !p.inputClosed {
			p.ready.Wait()
		}
		if p.inputClosed || len(p.pending) == 0 {
			f, typed := p.input, p.call.terminal != nil && !p.inputClosed
			p.mu.Unlock()
			if typed && f != nil {
				// A terminal has no end of input but the one typed: ^D
				// (VEOF) ends a line-reading program's input as at a keyboard.
				_, _ = f.Write([]byte{4})
			}
			p.closeInput(a)
			return
		}
		chunk, f := p.pending[0], p.input
		p.mu.Unlock()
		_, err := f.Write(chunk)
		p.mu.Lock()
		if p.inputClosed {
			p.mu.Unlock()
			return // closed under the write, its chunk credited then
		}
		if err != nil {
			p.mu.Unlock()
			p.closeInput(a) // the reader went away; the rest is moot
			return
		}
		p.pending = p.pending[1:]
		p.mu.Unlock()
		a.credit(p.call.id, p.call.epoch, 1)
	}
}

// closeInput closes its stdin for good, crediting what was never written.
func (p *program) closeInput(a *Agent) {
	p.mu.Lock()
	if p.inputClosed && p.input == nil {
		p.mu.Unlock()
		return
	}
	p.inputClosed = true
	if p.input != nil {
		_ = p.input.Close()
		p.input = nil
	}
	left := len(p.pending)
	p.pending = nil
	p.mu.Unlock()
	p.ready.Broadcast()
	if left > 0 {
		a.credit(p.call.id, p.call.epoch, left)
	}
}
