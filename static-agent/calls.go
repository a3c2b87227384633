package main

// Commands: an Exec runs `shell -c command` as the sandbox user through the
// C launcher (runtime/agent/spawn.c: a new session, oom_score_adj 1000, the
// call's group, the uid/gid drop, the cwd, the syscall filter; settings Go's
// os/exec cannot make in the child), with its stdin from the request's body
// and the head and tail of its output captured, under its deadline, its
// idle limit and Cancel. The agent is the parent of every command and, as
// PID 1, of every orphan: one reaper reads every exit status (reap.go).

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"toolrt/agent/protocol"
)

const (
	helperName = "toolrt-spawn"
	readChunk  = 65536
)

// The launcher's failure record (procs.REPORT, "=Iii": type, stage, errno).
const (
	reportSize  = 12
	reportError = 1
	stageSetup  = 1
	stageUser   = 2
	stageCwd    = 3
	stageExec   = 4
	stageFilter = 5
)

// Runner starts commands and hands each its exit status.
type Runner struct {
	helper    string
	filter    string
	slack     string // the timer slack commands get (timerslack.go), or keepSlack
	mu        sync.Mutex
	nextGroup uint32
	exits     map[int]*exitHook
	reaped    chan struct{} // closed at each reap (nextReap)
	// Stops runaway leftovers when a start ran into the pids or memory
	// limit (Agent.relieve); the start is then tried once more.
	relieve func(kind string, keep ...uint32) bool
}

// exitHook is what the reaper does for a command's main process: `before`
// (taking the shell's state report) right after reaping it, then the status.
type exitHook struct {
	status  chan syscall.WaitStatus
	before  func()
	started func(pid int) // with the pid, before the reaper can look
}

// NewRunner finds the launcher beside this binary and builds the filter.
func NewRunner() (*Runner, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	filter, err := filterHex()
	if err != nil {
		return nil, err
	}
	return &Runner{
		helper:    filepath.Join(filepath.Dir(self), helperName),
		slack:     keepSlack,
		filter:    filter,
		nextGroup: firstGroup(),
		exits:     map[int]*exitHook{},
		reaped:    make(chan struct{}),
	}, nil
}

// Call is one running Exec.
type Call struct {
	id      int64
	epoch   int64 // of the daemon that sent it: its answer and events go there
	request *protocol.Exec
	group   uint32
	pid     int
	stop    chan string // a reason to kill it (Cancel)
	// The session's secrets when it started: in its environment, redacted
	// from its output and from the exports it reports.
	redactor *Redactor
	output   chan struct{}
	// Its terminal, typed into (process_input, a program's Stdin), resized
	// and asked for its foreground; nil without one, closed at its end.
	terminal *keyboard
	// Who it runs as: nil for the sandbox user (a command's), else a
	// program's user (Spawn.user).
	user *who
}

func init() {
	handle("exec", func(a *Agent, frame *protocol.Frame, m protocol.Message) {
		request := m.(*protocol.Exec)
		if a.resumed(frame.ID, frame.Epoch, request.CallID, request.Resume) {
			return
		}
		a.starting(request.CallID)
		go a.exec(frame.ID, frame.Epoch, request, frame.Body)
	})
	handle("cancel", func(a *Agent, frame *protocol.Frame, m protocol.Message) {
		cancel := m.(*protocol.Cancel)
		a.mu.Lock()
		call := a.calls[cancel.Target]
		if p := a.programs[cancel.Target]; p != nil {
			call = p.call
		}
		a.mu.Unlock()
		if call != nil {
			select {
			case call.stop <- cancel.Reason:
			default:
			}
		}
		a.cancelTransfer(cancel.Target)
		reply := protocol.NewCancelled()
		a.send(&reply, frame.ID, nil)
	})
}

// shellOf is bash when the image has it, else sh.
func shellOf() string {
	if st, err := os.Stat("/bin/bash"); err == nil && st.Mode().IsRegular() {
		return "/bin/bash"
	}
	return "/bin/sh"
}

func (a *Agent) exec(id, epoch int64, request *protocol.Exec, stdin []byte) {
	fail := func(code, message string) {
		f := protocol.NewFailure()
		f.Code, f.Message = code, message
		a.answerCall(id, epoch, request.CallID, &f, nil)
	}
	if request.Background && !a.procs.hasRoom(request.MaxBackground) {
		fail(protocol.LimitExceeded, fmt.Sprintf("%d background processes are already running "+
			"(the session's maximum); stop one with process_kill", request.MaxBackground))
		return
	}
	started := time.Now()
	oomBefore, oomKnown := oomKills()
	// Leftovers of earlier calls must not leave this one without room.
	a.relieve(pressure())
	call := &Call{id: id, epoch: epoch, request: request, stop: make(chan string, 1),
		output: make(chan struct{}, 1), redactor: a.redactor.get()}
	// The next call's shell starts once this one is answered, the session idle.
	defer a.spareWhenIdle()
	ready := a.spareFor(request)
	a.planSpare(request, call.redactor)
	var run *run
	if ready != nil {
		run = a.runInSpare(ready, call, stdin)
	}
	if run == nil {
		var err error
		if run, err = a.runner.start(call, stdin, shellOf()); err != nil {
			code, message := protocol.Internal, "cannot start the command: "+err.Error()
			var errno syscall.Errno
			if errors.As(err, &errno) {
				code, message = failureOfSpawn(stageExec, errno, "")
			}
			for _, note := range a.healer.takeNotes() {
				message += "; " + note
			}
			fail(code, message)
			return
		}
	}
	a.healer.started(call.group, request.CallID)
	a.mu.Lock()
	a.calls[id] = call
	a.mu.Unlock()
	// A call leaves the table before its answer is sent: the daemon may act
	// on the answer at once (a restore's stop_leftovers), and a call still in
	// the table keeps its processes from being stopped.
	forget := func() {
		a.mu.Lock()
		delete(a.calls, id)
		a.mu.Unlock()
	}
	defer forget()
	run.stdout.start(a, call)
	if run.stderr != run.stdout {
		run.stderr.start(a, call)
	}
	out := a.await(call, run.exit)
	if !out.detach {
		_ = run.stdin.Close()
		call.terminal.close()
	}
	if failure := run.spawnFailure(request.Cwd); failure != nil {
		forget()
		a.answerCall(id, epoch, request.CallID, failure, nil)
		return
	}
	if out.detach {
		if out.gone {
			run.stdout.wait(time.Second)
			run.stderr.wait(time.Second)
		}
		p := a.detach(call, run, started, out.idle, out)
		var deadline time.Time
		if out.idle && request.DeadlineAfterIdle {
			deadline = started.Add(seconds(request.TimeoutS))
		}
		a.spareWhenIdle()
		a.keep(p, run, deadline)
		return
	}
	status, reason := out.status, out.reason
	run.stdout.cut()
	run.stderr.cut()
	result := protocol.NewExecResult()
	result.CallID = request.CallID
	result.Killed = reason
	if run.state != nil && reason == "" {
		result.ShellState, result.Notes = run.state.outcome(request.ReportEnv)
		if result.ShellState != nil && result.ShellState.Env != nil {
			// The daemon keeps exports: references to secrets, never values.
			var notes []string
			result.ShellState.Env, notes = call.redactor.references(result.ShellState.Env)
			result.Notes = append(result.Notes, notes...)
		}
		a.spareFollows(result.ShellState)
	}
	if request.ReportEnv && run.state == nil && reason == "" {
		result.Notes = append(result.Notes, "exports are kept across calls only under bash or "+
			"BusyBox's sh; this image's "+run.shell+" is neither")
	}
	code := int64(exitCode(status))
	result.ExitCode = &code
	if oomAfter, ok := oomKills(); ok && oomKnown && oomAfter > oomBefore {
		result.Oom = true
	}
	result.Idle = reason == "idle"
	result.BackgroundCapHit = out.capHit
	var body bytes.Buffer
	result.Stdout = run.stdout.capture.finish(&body)
	if run.stderr != run.stdout {
		result.Stderr = run.stderr.capture.finish(&body)
	}
	result.DurationMS = time.Since(started).Milliseconds()
	result.Notes = append(result.Notes, a.healer.takeNotes()...)
	forget()
	a.answerCall(id, epoch, request.CallID, &result, body.Bytes())
}

// outcome is how a call's wait ended.
type outcome struct {
	status syscall.WaitStatus // the main process's, when exited
	exited bool
	reason string // why the agent killed it
	detach bool   // answer with a handle; its processes keep running
	gone   bool   // no process of its tree is left
	idle   bool   // silent past its limit (moved to the background, or killed)
	capHit bool   // silent, to be moved, but the background was full
}

// await waits for the main process's exit; on the deadline, silence or a
// Cancel it kills the whole tree first. A background call waits settle_s,
// or less when its whole tree ends first.
func (a *Agent) await(call *Call, exit chan syscall.WaitStatus) outcome {
	request := call.request
	var deadline, settle, idle, look <-chan time.Time
	var idleTimer *time.Timer
	if request.Background {
		timer := time.NewTimer(seconds(request.SettleS))
		defer timer.Stop()
		settle = timer.C
	} else {
		timer := time.NewTimer(seconds(request.TimeoutS))
		defer timer.Stop()
		deadline = timer.C
		if request.IdleTimeoutS > 0 {
			idleTimer = time.NewTimer(seconds(request.IdleTimeoutS))
			defer idleTimer.Stop()
			idle = idleTimer.C
		}
	}
	var out outcome
	for {
		select {
		case status := <-exit:
			out.status, out.exited, exit = status, true, nil
			if !request.Background {
				return out
			}
			look = time.After(0)
		case <-look:
			// A background call whose tree has ended is answered with a
			// handle too, one that reads as exited.
			if len(members(call.group)) == 0 {
				out.detach, out.gone = true, true
				return out
			}
			look = time.After(treeGap)
		case <-settle:
			out.detach = true
			return out
		case <-deadline:
			return kill(call, exit, out, "deadline")
		case <-idle:
			if request.OnIdle == "background" && a.procs.hasRoom(request.MaxBackground) {
				return outcome{detach: true, idle: true}
			}
			out = kill(call, exit, out, "idle")
			out.capHit = request.OnIdle == "background"
			return out
		case reason := <-call.stop:
			return kill(call, exit, out, reason)
		case <-call.output:
			if idleTimer != nil {
				if !idleTimer.Stop() {
					select {
					case <-idleTimer.C:
					default:
					}
				}
				idleTimer.Reset(seconds(request.IdleTimeoutS))
			}
		}
	}
}

// kill ends the call's whole tree: TERM first, then, after grace_s or
// once the main process is gone, every process of the call stopped and
// killed. With the main process's status, for `reason`.
func kill(call *Call, exit chan syscall.WaitStatus, out outcome, reason string) outcome {
	out.reason = reason
	grace := time.Duration(call.request.GraceS * float64(time.Second))
	if out.exited {
		// A background call's main process is gone; its tree is not.
		signalTree(call.group, syscall.SIGTERM)
		if !waitFor(func() bool { return len(members(call.group)) == 0 }, grace) {
			stopAndKill(call.group)
		}
		return out
	}
	signalTree(call.group, syscall.SIGTERM, call.pid)
	timer := time.NewTimer(grace)
	defer timer.Stop()
	select {
	case out.status = <-exit:
		stopAndKill(call.group)
	case <-timer.C:
		stopAndKill(call.group, call.pid)
		out.status = <-exit
	}
	// Answer once the killed processes are gone (reaped), as the Python
	// agent does: a caller that looks right after the answer finds none.
	// A process the kernel holds (uninterruptible I/O) does not hold the
	// answer for longer than treeGoneWait.
	waitFor(func() bool { return present(call.group) == 0 }, treeGoneWait)
	out.exited = true
	return out
}

// treeGoneWait bounds how long a killed call's answer waits for its tree.
const treeGoneWait = 5 * time.Second

func seconds(s float64) time.Duration {
	if s <= 0 || s > 1e7 {
		s = 1e7
	}
	return time.Duration(s * float64(time.Second))
}

func exitCode(status syscall.WaitStatus) int {
	if status.Signaled() {
		return 128 + int(status.Signal())
	}
	return status.ExitStatus()
}

// run is a started command's descriptors and exit.
type run struct {
	stdout, stderr *stream
	stdin          *os.File
	report         *os.File
	state          *stateChannel // nil unless the shell reports its state
	shell          string
	exit           chan syscall.WaitStatus
}

func (r *Runner) start(call *Call, stdin []byte, shell string) (*run, error) {
	var closeAfter []int
	defer func() {
		for _, fd := range closeAfter {
			_ = syscall.Close(fd)
		}
	}()
	pipe := func() (int, int, error) {
		var p [2]int
		err := syscall.Pipe2(p[:], syscall.O_CLOEXEC)
		return p[0], p[1], err
	}
	var inR, inW, outR, outW, errR, errW int
	var err error
	if call.request.Tty {
		// One terminal for all three (one stream, "stdout"): its body is
		// typed into a copy of the master, process_input into another.
		var master, slave int
		if master, slave, err = openTerminal(protocol.TtyRows, protocol.TtyCols); err != nil {
			return nil, err
		}
		closeAfter = append(closeAfter, slave)
		if inW, err = dupCloexec(master); err == nil {
			call.terminal, err = newKeyboard(master)
		}
		if err != nil {
			_ = syscall.Close(master)
			if inW >= 0 {
				_ = syscall.Close(inW)
			}
			return nil, err
		}
		inR, outR, outW, errR, errW = slave, master, slave, master, slave
	} else {
		if inR, inW, err = pipe(); err != nil {
			return nil, err
		}
		closeAfter = append(closeAfter, inR)
		if outR, outW, err = pipe(); err != nil {
			_ = syscall.Close(inW)
			return nil, err
		}
		closeAfter = append(closeAfter, outW)
		errR, errW = outR, outW
		if !call.request.MergeOutput {
			if errR, errW, err = pipe(); err != nil {
				return nil, err
			}
			closeAfter = append(closeAfter, errW)
		}
	}
	repR, repW, err := pipe()
	if err != nil {
		return nil, err
	}
	closeAfter = append(closeAfter, repW)
	files := []uintptr{uintptr(inR), uintptr(outW), uintptr(errW), uintptr(repW)}
	var state *stateChannel
	if call.request.ReportState && reportsState(shell) {
		if state, err = newStateChannel(); err != nil {
			return nil, err
		}
		closeAfter = append(closeAfter, state.peer)
		for len(files) < stateFd {
			files = append(files, ^uintptr(0)) // closed in the child
		}
		files = append(files, uintptr(state.peer))
	}
	command := wrapCommand(call.request.Command, state != nil, call.request.Pipefail, call.request.ReportEnv)
	if shell != "/bin/bash" {
		command = call.request.Command
		if state != nil {
			command = wrapPosix(command, call.request.Pipefail, call.request.ReportEnv)
		} else if call.request.Pipefail {
			command = "set -o pipefail; " + command
		}
	}

	var hook *exitHook
	if state != nil {
		hook = &exitHook{before: state.settle, started: func(pid int) { state.shellPid = pid }}
	}
	exit, err := r.launch(call, []string{shell, "-c", command}, files, hook)
	if err != nil {
		if state != nil {
			_ = state.file.Close()
		}
		for _, fd := range []int{inW, outR, repR} {
			_ = syscall.Close(fd)
		}
		if errR != outR {
			_ = syscall.Close(errR)
		}
		call.terminal.close()
		return nil, err
	}
	if state != nil {
		go state.read()
	}
	// Non-blocking, so that closing it ends a write still waiting.
	_ = syscall.SetNonblock(inW, true)
	stdinFile := os.NewFile(uintptr(inW), "stdin")
	go feed(stdinFile, stdin)
	out := newStream(outR, "stdout", call.request, call.redactor)
	errs := out
	if errR != outR {
		errs = newStream(errR, "stderr", call.request, call.redactor)
	}
	report := os.NewFile(uintptr(repR), "report")
	return &run{stdout: out, stderr: errs, stdin: stdinFile, report: report, state: state,
		shell: shell, exit: exit}, nil
}

// launch starts `program` through the launcher as the call's user, in the
// call's cwd and a new call group, with the call's environment and `files`
// as its descriptors 0, 1, 2, 3...; what `hook` asks (if given) is done
// once the pid is known and when the reaper takes the main process.
func (r *Runner) launch(call *Call, program []string, files []uintptr, hook *exitHook) (chan syscall.WaitStatus, error) {
	return r.launchWith(call, call.redactor.environment(call.request.Env), program, files, hook)
}

// launchWith is launch with the environment given (a spare's, spare.go).
func (r *Runner) launchWith(call *Call, environment map[string]string, program []string, files []uintptr, hook *exitHook) (chan syscall.WaitStatus, error) {
	env := make([]string, 0, len(environment))
	for k, v := range environment {
		env = append(env, k+"="+v)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	call.group = r.nextGroup
	r.nextGroup++
	user := sandboxUser
	if call.user != nil {
		user = *call.user
	}
	argv := append([]string{r.helper, r.filter, strconv.FormatUint(uint64(call.group), 10),
		user.launcherUID(), strconv.Itoa(user.gid), call.request.Cwd, r.slack},
		program...)
	attr := &syscall.ProcAttr{Env: env, Files: files}
	pid, err := syscall.ForkExec(r.helper, argv, attr)
	if kind := shortOf(err); kind != "" && r.relieve != nil {
		// The reaper takes this lock: let it reap what relieve stops.
		r.mu.Unlock()
		relieved := r.relieve(kind, call.group)
		r.mu.Lock()
		if relieved {
			pid, err = syscall.ForkExec(r.helper, argv, attr)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("the launcher %s: %w", r.helper, err)
	}
	if hook == nil {
		hook = &exitHook{}
	}
	if hook.before == nil {
		hook.before = func() {}
	}
	if hook.started != nil {
		hook.started(pid)
	}
	// Registered before the reaper can look: it takes this lock too.
	hook.status = make(chan syscall.WaitStatus, 1)
	r.exits[pid] = hook
	call.pid = pid
	return hook.status, nil
}

// feed writes the command's stdin and closes it; a command that exits
// without reading it all ends the write (EPIPE), and so does the end of the
// call (the file is closed under the write), whatever still holds the pipe.
func feed(f *os.File, data []byte) {
	defer f.Close()
	_, _ = f.Write(data)
}

// spawnFailure is the Failure the launcher's record asks for, or nil when
// the command started. No byte of the cwd or the command ever reaches the
// record: the agent words the message itself.
func (r *run) spawnFailure(cwd string) *protocol.Failure {
	return launcherReport(r.report, "command", func(stage int32, errno syscall.Errno) (string, string) {
		return failureOfSpawn(stage, errno, cwd)
	})
}

// launcherReport reads the launcher's report pipe to its end: nil when it
// closed empty (the exec succeeded), else the Failure `words` makes of its
// record's stage and errno.
func launcherReport(report *os.File, what string, words func(int32, syscall.Errno) (string, string)) *protocol.Failure {
	data := make([]byte, 4*reportSize)
	n, _ := readFull(report, data)
	_ = report.Close()
	if n == 0 {
		return nil
	}
	f := protocol.NewFailure()
	if n != reportSize || binary.LittleEndian.Uint32(data) != reportError {
		f.Message = fmt.Sprintf("cannot start the %s: the launcher wrote %d bytes that are not a report", what, n)
		return &f
	}
	stage := int32(binary.LittleEndian.Uint32(data[4:]))
	errno := syscall.Errno(binary.LittleEndian.Uint32(data[8:]))
	f.Code, f.Message = words(stage, errno)
	return &f
}

func readFull(f *os.File, buf []byte) (int, error) {
	total := 0
	for total < len(buf) {
		n, err := f.Read(buf[total:])
		total += n
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

// failureOfSpawn is procs.failure_of_spawn: the agent error code and message
// for a command that could not start.
func failureOfSpawn(stage int32, errno syscall.Errno, cwd string) (string, string) {
	what := map[int32]string{
		stageSetup:  "preparing the command's process",
		stageUser:   "dropping to the sandbox user",
		stageCwd:    "cwd",
		stageExec:   shellOf(),
		stageFilter: "installing the syscall filter",
	}[stage]
	if stage == stageCwd {
		what = "cwd " + clip(cwd, 300)
	}
	code := protocol.Internal
	switch {
	case errno == syscall.EAGAIN || errno == syscall.ENOMEM:
		code = protocol.LimitExceeded
	case errno == syscall.ENOENT || errno == syscall.ENOTDIR:
		code = protocol.NotFound
	case stage == stageCwd && (errno == syscall.EACCES || errno == syscall.EPERM || errno == syscall.ELOOP):
		code = protocol.PathDenied
	case errno == syscall.E2BIG || errno == syscall.ENAMETOOLONG:
		code = protocol.InvalidArguments
	}
	return code, fmt.Sprintf("cannot start the command: %s: %s", what, strerror(errno))
}

// strerror is the C library's wording (Go's starts in lower case).
func strerror(errno syscall.Errno) string {
	text := errno.Error()
	if text == "" {
		return text
	}
	return strings.ToUpper(text[:1]) + text[1:]
}

// oomFiles hold the cgroup's OOM-kill counter, v1 then v2; kept open.
var oomFiles = []*keptFile{
	newKeptFile("/sys/fs/cgroup/memory/memory.oom_control"),
	newKeptFile("/sys/fs/cgroup/memory.events"),
}

// oomKills is the cgroup's OOM-kill counter (v1 or v2).
func oomKills() (int64, bool) {
	for _, file := range oomFiles {
		data, err := file.read()
		if err != nil {
			continue
		}
		for _, line := range bytes.Split(data, []byte("\n")) {
			if value, ok := cutPrefix(line, []byte("oom_kill ")); ok {
				n, err := strconv.ParseInt(string(bytes.TrimSpace(value)), 10, 64)
				return n, err == nil
			}
		}
	}
	return 0, false
}
