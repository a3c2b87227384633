package main

// The agent's one spare shell (spare.go) and where the next one starts: a
// call takes the spare when it may become its shell, each call says where
// the next one starts, and once the session is idle (no call or program
// running) and has room (no pressure, healing.go) the next call's shell
// starts. Off with TOOLRT_SPARE_SHELL=0.

import (
	"os"
	"sync"
	"syscall"

	"toolrt/agent/protocol"
)

var spareEnabled = os.Getenv("TOOLRT_SPARE_SHELL") != "0"

type spareSlot struct {
	// Held while a spare starts, so that dropping one waits for it (a
	// call never does: it takes only what is already there).
	starting sync.Mutex
	mu       sync.Mutex // guards what follows
	shell    *spare
	plan     *sparePlan
}

// spareFor takes the spare when it may become this call's shell. One for
// another cwd, or dead, is discarded (the next idle moment starts one as
// this call); one still starting is left for a later call.
func (a *Agent) spareFor(request *protocol.Exec) *spare {
	s := &a.spares
	s.mu.Lock()
	defer s.mu.Unlock()
	sp := s.shell
	if sp == nil || request.Tty {
		return nil // the spare has pipes, not a terminal
	}
	ok, starting := false, false
	if id, known := directoryID(request.Cwd); known && !sp.dead.Load() && sp.cwd == request.Cwd && id == sp.cwdID {
		ok, starting = a.runner.ready(sp)
	}
	if starting {
		return nil
	}
	s.shell = nil
	if !ok {
		a.runner.discard(sp)
		return nil
	}
	return sp
}

// planSpare is where the next spare starts: this call's cwd and the
// session's environment, never the call's own `env`; none without it.
func (a *Agent) planSpare(request *protocol.Exec, redactor *Redactor) {
	s := &a.spares
	s.mu.Lock()
	defer s.mu.Unlock()
	s.plan = nil
	if request.SpareEnv != nil {
		s.plan = &sparePlan{request.Cwd, redactor.environment(request.SpareEnv)}
	}
}

// spareFollows moves the next spare to where a call's shell left off.
func (a *Agent) spareFollows(report *protocol.ShellReport) {
	s := &a.spares
	s.mu.Lock()
	defer s.mu.Unlock()
	if report != nil && report.Cwd != "" && s.plan != nil {
		s.plan = &sparePlan{report.Cwd, s.plan.env}
	}
}

// spareWhenIdle starts the next call's shell when the session is idle and
// has room, under bash.
func (a *Agent) spareWhenIdle() {
	if !spareEnabled || shellOf() != "/bin/bash" {
		return
	}
	s := &a.spares
	s.starting.Lock()
	defer s.starting.Unlock()
	s.mu.Lock()
	plan, waiting := s.plan, s.shell != nil
	s.mu.Unlock()
	if plan == nil || waiting || a.busy() || pressure() != "" {
		return
	}
	sp := a.runner.startSpare(plan, a.spareReaped)
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case sp != nil:
		s.shell = sp
	case s.plan == plan:
		s.plan = nil // not again until the next call says where
	}
}

// busy says whether a call or a program runs.
func (a *Agent) busy() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.calls) > 0 || len(a.programs) > 0
}

// dropSpare kills the waiting spare, if any (a restore's stop_leftovers);
// its group, or false. The next idle moment starts another.
func (a *Agent) dropSpare() (uint32, bool) {
	s := &a.spares
	s.starting.Lock()
	defer s.starting.Unlock()
	s.mu.Lock()
	sp := s.shell
	s.shell = nil
	s.mu.Unlock()
	if sp == nil {
		return 0, false
	}
	a.runner.discard(sp)
	return sp.group, true
}

// spareReaped: the spare died unused (another process of the sandbox user
// killed it): none again until the next call, so a killer is not fed spares.
func (a *Agent) spareReaped(sp *spare) {
	s := &a.spares
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.shell == sp {
		s.shell, s.plan = nil, nil
		a.runner.discard(sp)
	}
}

// runInSpare makes the spare the call's shell; nil (and the spare
// discarded) when it cannot be, before anything of the call ran. A call
// with stdin starts its own shell: the spare's stdin is /dev/null, as no
// other process could have written into it while it waited.
func (a *Agent) runInSpare(sp *spare, call *Call, stdin []byte) *run {
	request := call.request
	command := wrapCommand(request.Command, request.ReportState, request.Pipefail, request.ReportEnv)
	var script []byte
	ok := len(stdin) == 0 && untouched(sp)
	if ok {
		env := call.redactor.environment(request.Env)
		script, ok = scriptFor(sp, env, command, request.MergeOutput, request.ReportState)
	}
	if !ok || !seal(sp, script) {
		a.runner.discard(sp)
		return nil
	}
	// Its state channel is the call's from now on: the reaper settles it.
	var state *stateChannel
	if request.ReportState {
		state = sp.state
		go state.read()
		sp.reporting.Store(true)
	}
	sp.taken.Store(true)
	if !goAhead(sp) {
		a.runner.discard(sp)
		return nil
	}
	if state == nil {
		_ = sp.state.file.Close() // the preamble closed the shell's end
	}
	_ = syscall.Close(sp.script)
	_ = syscall.Close(sp.goSock)
	call.group, call.pid = sp.group, sp.pid
	out := newStream(sp.outR, "stdout", request, call.redactor)
	errs := out
	if request.MergeOutput {
		_ = syscall.Close(sp.errR) // the preamble put stderr on stdout
	} else {
		errs = newStream(sp.errR, "stderr", request, call.redactor)
	}
	// Read to its end already: it says the launcher exec'd bash.
	report := os.NewFile(uintptr(sp.reportR), "report")
	return &run{stdout: out, stderr: errs, report: report, state: state, shell: "/bin/bash", exit: sp.exit}
}
