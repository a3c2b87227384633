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
	mu        sync.Mutex
	nextGroup uint32
	exits     map[int]*exitHook
}

// exitHook is what the reaper does for a command's main process: `before`
// (taking the shell's state report) right after reaping it, then the status.
type exitHook struct {
	status chan syscall.WaitStatus
	before func()
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
		filter:    filter,
		nextGroup: firstGroup(),
		exits:     map[int]*exitHook{},
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
	output  chan struct{}
}

func init() {
	handle("exec", func(a *Agent, frame *protocol.Frame, m protocol.Message) {
		request := m.(*protocol.Exec)
		if a.resumed(frame.ID, frame.Epoch, request) {
			return
		}
		a.starting(request)
		go a.exec(frame.ID, frame.Epoch, request, frame.Body)
	})
	handle("cancel", func(a *Agent, frame *protocol.Frame, m protocol.Message) {
		cancel := m.(*protocol.Cancel)
		a.mu.Lock()
		call := a.calls[cancel.Target]
		a.mu.Unlock()
		if call != nil {
			select {
			case call.stop <- cancel.Reason:
			default:
			}
		}
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
		a.answerCall(id, epoch, request, &f, nil)
	}
	if request.Background {
		fail(protocol.InvalidArguments,
			"the static agent does not run background commands yet; run this session with agent = \"python\"")
		return
	}
	started := time.Now()
	oomBefore, oomKnown := oomKills()
	call := &Call{id: id, epoch: epoch, request: request, stop: make(chan string, 1), output: make(chan struct{}, 1)}
	run, err := a.runner.start(call, stdin, shellOf())
	if err != nil {
		fail(protocol.Internal, "cannot start the command: "+err.Error())
		return
	}
	a.mu.Lock()
	a.calls[id] = call
	a.mu.Unlock()
	defer func() {
		a.mu.Lock()
		delete(a.calls, id)
		a.mu.Unlock()
	}()
	run.stdout.start(a, call)
	if run.stderr != run.stdout {
		run.stderr.start(a, call)
	}
	status, reason := a.await(call, run.exit)
	_ = run.stdin.Close()
	if failure := run.spawnFailure(request.Cwd); failure != nil {
		a.answerCall(id, epoch, request, failure, nil)
		return
	}
	run.stdout.cut()
	run.stderr.cut()
	result := protocol.NewExecResult()
	result.CallID = request.CallID
	result.Killed = reason
	if run.state != nil && reason == "" {
		bash := run.shell == "/bin/bash"
		result.ShellState, result.Notes = run.state.outcome(request.ReportEnv && bash)
		if request.ReportEnv && !bash {
			result.Notes = append(result.Notes, "exports are kept across calls only under bash; "+
				"this image's "+run.shell+" is not bash")
		}
	}
	code := int64(exitCode(status))
	result.ExitCode = &code
	if oomAfter, ok := oomKills(); ok && oomKnown && oomAfter > oomBefore {
		result.Oom = true
	}
	if reason == "idle" {
		result.Idle = true
		if request.OnIdle == "background" {
			result.Notes = append(result.Notes,
				"the static agent cannot keep a silent command in the background yet: it was killed")
		}
	}
	var body bytes.Buffer
	result.Stdout = run.stdout.capture.finish(&body)
	if run.stderr != run.stdout {
		result.Stderr = run.stderr.capture.finish(&body)
	}
	result.DurationMS = time.Since(started).Milliseconds()
	a.answerCall(id, epoch, request, &result, body.Bytes())
}

// await waits for the main process's exit; on the deadline, silence or a
// Cancel it kills the whole tree first. The status and why it was killed.
func (a *Agent) await(call *Call, exit chan syscall.WaitStatus) (syscall.WaitStatus, string) {
	request := call.request
	deadline := time.NewTimer(seconds(request.TimeoutS))
	defer deadline.Stop()
	var idle <-chan time.Time
	var idleTimer *time.Timer
	if request.IdleTimeoutS > 0 {
		idleTimer = time.NewTimer(seconds(request.IdleTimeoutS))
		defer idleTimer.Stop()
		idle = idleTimer.C
	}
	for {
		select {
		case status := <-exit:
			return status, ""
		case <-deadline.C:
			return kill(call, exit), "deadline"
		case <-idle:
			return kill(call, exit), "idle"
		case reason := <-call.stop:
			return kill(call, exit), reason
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
// killed. The main process's status.
func kill(call *Call, exit chan syscall.WaitStatus) syscall.WaitStatus {
	signalTree(call.group, syscall.SIGTERM, call.pid)
	grace := time.NewTimer(time.Duration(call.request.GraceS * float64(time.Second)))
	defer grace.Stop()
	select {
	case status := <-exit:
		stopAndKill(call.group)
		return status
	case <-grace.C:
		stopAndKill(call.group, call.pid)
		return <-exit
	}
}

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
	inR, inW, err := pipe()
	if err != nil {
		return nil, err
	}
	closeAfter = append(closeAfter, inR)
	outR, outW, err := pipe()
	if err != nil {
		_ = syscall.Close(inW)
		return nil, err
	}
	closeAfter = append(closeAfter, outW)
	errR, errW := outR, outW
	if !call.request.MergeOutput {
		if errR, errW, err = pipe(); err != nil {
			return nil, err
		}
		closeAfter = append(closeAfter, errW)
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
			command = wrapPosix(command, call.request.Pipefail)
		} else if call.request.Pipefail {
			command = "set -o pipefail; " + command
		}
	}

	r.mu.Lock()
	call.group = r.nextGroup
	r.nextGroup++
	argv := []string{r.helper, r.filter, strconv.FormatUint(uint64(call.group), 10),
		strconv.Itoa(protocol.SandboxUid), strconv.Itoa(protocol.SandboxGid), call.request.Cwd,
		shell, "-c", command}
	env := make([]string, 0, len(call.request.Env))
	for k, v := range call.request.Env {
		env = append(env, k+"="+v)
	}
	attr := &syscall.ProcAttr{
		Env:   env,
		Files: files,
	}
	pid, err := syscall.ForkExec(r.helper, argv, attr)
	exit := make(chan syscall.WaitStatus, 1)
	if err == nil {
		// Registered before the reaper can look: it takes this lock too.
		hook := &exitHook{status: exit, before: func() {}}
		if state != nil {
			state.shellPid = pid
			hook.before = state.settle
		}
		r.exits[pid] = hook
	}
	r.mu.Unlock()
	if err != nil {
		if state != nil {
			_ = state.file.Close()
		}
		for _, fd := range []int{inW, outR, errR, repR} {
			_ = syscall.Close(fd)
		}
		if errR == outR {
			_ = syscall.Close(outR)
		}
		return nil, fmt.Errorf("the launcher %s: %v", r.helper, err)
	}
	call.pid = pid
	if state != nil {
		go state.read()
	}
	// Non-blocking, so that closing it ends a write still waiting.
	_ = syscall.SetNonblock(inW, true)
	stdinFile := os.NewFile(uintptr(inW), "stdin")
	go feed(stdinFile, stdin)
	out := newStream(outR, "stdout", call.request)
	errs := out
	if errR != outR {
		errs = newStream(errR, "stderr", call.request)
	}
	report := os.NewFile(uintptr(repR), "report")
	return &run{stdout: out, stderr: errs, stdin: stdinFile, report: report, state: state,
		shell: shell, exit: exit}, nil
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
	data := make([]byte, 4*reportSize)
	n, _ := readFull(r.report, data)
	_ = r.report.Close()
	if n == 0 {
		return nil
	}
	f := protocol.NewFailure()
	if n != reportSize || binary.LittleEndian.Uint32(data) != reportError {
		f.Message = fmt.Sprintf("cannot start the command: the launcher wrote %d bytes that are not a report", n)
		return &f
	}
	stage := int32(binary.LittleEndian.Uint32(data[4:]))
	errno := syscall.Errno(binary.LittleEndian.Uint32(data[8:]))
	f.Code, f.Message = failureOfSpawn(stage, errno, cwd)
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

// oomKills is the cgroup's OOM-kill counter (v1 or v2).
func oomKills() (int64, bool) {
	for _, path := range []string{"/sys/fs/cgroup/memory/memory.oom_control", "/sys/fs/cgroup/memory.events"} {
		data, err := os.ReadFile(path)
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
