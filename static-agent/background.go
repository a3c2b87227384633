package main

// Background processes: a call becomes one
// when it is started with `background` (answered after settle_s) or goes
// silent past its idle limit with on_idle "background". Its answer carries
// a p<N> handle; its processes keep running, their output (redacted) goes
// to a ring of the newest ring_cap bytes, and the call's own goroutine
// stays with it until its whole tree is gone: its main process's status,
// process_kill, the deadline an idle move may keep.

import (
	"bytes"
	"fmt"
	"math"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"

	"toolrt/agent/protocol"
)

const (
	keepFinished  = 16 // finished processes kept for process_list / process_output
	commandShown  = 200
	treeGap       = 50 * time.Millisecond // after a reap, before a look at the trees
	treePoll      = 2 * time.Second       // the safety net's interval
	killPoll      = 20 * time.Millisecond // while a tree is being killed
	giveUpAfter   = 2 * time.Second       // after the final kill: answer without the tree
	leftoversWait = 2 * time.Second
)

// proc is a call the agent kept running after answering it. Its fields
// after `ring` are guarded by the registry's lock.
type proc struct {
	id      string
	call    *Call
	started time.Time
	ring    *ring
	kill    chan struct{} // process_kill asks the call's goroutine
	exited  bool          // the main process's status is known
	status  syscall.WaitStatus
	gone    bool   // no process of its tree is left
	reason  string // why the agent killed it
	ended   time.Time
	waiters []int64 // process_kill requests answered when the tree is gone
}

type registry struct {
	mu      sync.Mutex
	procs   []*proc // oldest first
	counter int
}

func (g *registry) liveLocked() int {
	live := 0
	for _, p := range g.procs {
		if !p.gone {
			live++
		}
	}
	return live
}

func (g *registry) hasRoom(cap int64) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return int64(g.liveLocked()) < cap
}

// adopt registers a call as p<N>, forgetting the oldest finished ones
// beyond keepFinished.
func (g *registry) adopt(call *Call, started time.Time, exited bool, status syscall.WaitStatus) *proc {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.counter++
	p := &proc{id: fmt.Sprintf("p%d", g.counter), call: call, started: started,
		ring: newRing(call.request.RingCap), kill: make(chan struct{}, 1), exited: exited, status: status}
	if exited {
		p.ended = time.Now()
	}
	g.procs = append(g.procs, p)
	var finished []*proc
	for _, q := range g.procs {
		if q.gone {
			finished = append(finished, q)
		}
	}
	for _, old := range finished[:max(0, len(finished)-keepFinished)] {
		g.remove(old)
	}
	return p
}

func (g *registry) remove(p *proc) {
	for i, q := range g.procs {
		if q == p {
			g.procs = append(g.procs[:i], g.procs[i+1:]...)
			return
		}
	}
}

func (g *registry) get(id string) *proc {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, p := range g.procs {
		if p.id == id {
			return p
		}
	}
	return nil
}

// liveGroups are the groups of the processes whose tree may still run.
func (g *registry) liveGroups() map[uint32]bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	groups := map[uint32]bool{}
	for _, p := range g.procs {
		if !p.gone {
			groups[p.call.group] = true
		}
	}
	return groups
}

// describeLocked is the process as process_list shows it.
func (p *proc) describeLocked() protocol.ProcessInfo {
	info := protocol.NewProcessInfo()
	info.ProcessID, info.Pid = p.id, int64(p.call.pid)
	info.Command = clipChars(p.call.request.Command, commandShown)
	switch {
	case p.reason != "":
		info.State = "killed"
	case !p.gone:
		info.State = "running"
	default:
		info.State = "exited"
	}
	if p.exited || p.reason != "" {
		code := int64(128 + int(syscall.SIGKILL))
		if p.exited {
			code = int64(exitCode(p.status))
		}
		info.ExitCode = &code
	}
	end := p.ended
	if end.IsZero() {
		end = time.Now()
	}
	info.RuntimeS = math.Round(end.Sub(p.started).Seconds()*1000) / 1000
	info.UnreadBytes = p.ring.unread()
	return info
}

// clipChars is the first n characters of s, the last three of them "..."
// when it is longer (the Python agent counts characters, not bytes).
func clipChars(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	runes := []rune(s)
	return string(runes[:n-3]) + "..."
}

// detach answers the call now with its handle and what it captured so far;
// from then on its output goes to the handle's ring.
func (a *Agent) detach(call *Call, run *run, started time.Time, idle bool, out outcome) *proc {
	// Adopted before it leaves the call table: its group is always in one
	// of the two, or a stop_leftovers would take it for a leftover.
	p := a.procs.adopt(call, started, out.exited, out.status)
	a.mu.Lock()
	delete(a.calls, call.id)
	a.mu.Unlock()
	if out.gone {
		a.ended(p, nil, true)
	}
	result := protocol.NewExecResult()
	result.CallID = call.request.CallID
	result.Idle = idle
	var body bytes.Buffer
	result.Stdout = run.stdout.detach(&body, p.ring)
	if run.stderr != run.stdout {
		result.Stderr = run.stderr.detach(&body, p.ring)
	}
	a.procs.mu.Lock()
	info := p.describeLocked()
	a.procs.mu.Unlock()
	result.ExitCode = info.ExitCode
	result.Background = &info
	result.DurationMS = time.Since(started).Milliseconds()
	a.answerCall(call.id, call.epoch, call.request.CallID, &result, body.Bytes())
	return p
}

// keep follows a detached call until its whole tree is gone: the main
// process's status, process_kill, the deadline an idle move may keep.
func (a *Agent) keep(p *proc, run *run, deadline time.Time) {
	call := p.call
	a.procs.mu.Lock()
	gone := p.gone
	a.procs.mu.Unlock()
	if gone {
		a.finishProc(p, run)
		return
	}
	var timeout <-chan time.Time
	if !deadline.IsZero() {
		timer := time.NewTimer(time.Until(deadline))
		defer timer.Stop()
		timeout = timer.C
	}
	look := time.NewTimer(treeGap)
	defer look.Stop()
	lookAt := time.Now().Add(treeGap)
	// lookSoon brings the next look forward, never back: reaps in a busy
	// sandbox must not keep postponing it.
	lookSoon := func() {
		if at := time.Now().Add(treeGap); at.Before(lookAt) {
			look.Stop()
			look.Reset(treeGap)
			lookAt = at
		}
	}
	for {
		a.procs.mu.Lock()
		exited := p.exited
		a.procs.mu.Unlock()
		exit := run.exit
		if exited {
			exit = nil
		}
		reaped := a.runner.nextReap()
		select {
		case status := <-exit:
			a.ended(p, &status, false)
			lookSoon()
		case <-reaped:
			lookSoon()
		case <-look.C:
			if exited && len(members(call.group)) == 0 {
				a.finishProc(p, run)
				return
			}
			look.Reset(treePoll)
			lookAt = time.Now().Add(treePoll)
		case <-p.kill:
			a.killProc(p, run, "killed")
			return
		case <-timeout:
			a.killProc(p, run, "deadline")
			return
		}
	}
}

// ended records the main process's status (when given) and that the
// process has ended; with gone, that its whole tree has.
func (a *Agent) ended(p *proc, status *syscall.WaitStatus, gone bool) {
	a.procs.mu.Lock()
	defer a.procs.mu.Unlock()
	if status != nil && !p.exited {
		p.exited, p.status = true, *status
	}
	if p.ended.IsZero() {
		p.ended = time.Now()
	}
	p.gone = p.gone || gone
}

// finishProc: the tree is gone. Its last output is read (the pipes end with
// it) before the process reads as exited; kill requests are answered.
func (a *Agent) finishProc(p *proc, run *run) {
	_ = run.stdin.Close()
	p.call.terminal.close()
	run.stdout.wait(time.Second)
	run.stderr.wait(time.Second)
	a.ended(p, nil, true)
	a.answerKill(p)
}

// killProc ends the tree: TERM, then after grace_s every process stopped
// and killed; kill requests are answered once it is gone, or giveUpAfter
// after the final kill (processes stuck in the kernel die when they leave it).
func (a *Agent) killProc(p *proc, run *run, reason string) {
	call := p.call
	a.procs.mu.Lock()
	p.reason = reason
	a.procs.mu.Unlock()
	unreaped := func() []int {
		select {
		case status := <-run.exit:
			a.ended(p, &status, false)
		default:
		}
		a.procs.mu.Lock()
		defer a.procs.mu.Unlock()
		if p.exited {
			return nil
		}
		return []int{call.pid}
	}
	gone := func() bool {
		return len(unreaped()) == 0 && len(members(call.group)) == 0
	}
	signalTree(call.group, syscall.SIGTERM, unreaped()...)
	if !waitFor(gone, time.Duration(call.request.GraceS*float64(time.Second))) {
		stopAndKill(call.group, unreaped()...)
		if !waitFor(gone, giveUpAfter) {
			// Answered without the tree; the safety net may still see it go.
			call.terminal.close()
			a.answerKill(p)
			a.keep(p, run, time.Time{})
			return
		}
	}
	a.finishProc(p, run)
}

// answerKill answers the process_kill requests waiting for the tree's end.
func (a *Agent) answerKill(p *proc) {
	a.procs.mu.Lock()
	waiters := p.waiters
	p.waiters = nil
	a.procs.mu.Unlock()
	for _, id := range waiters {
		a.sendProc(id, p, nil, 0, true)
	}
}

// waitFor polls done every killPoll for at most `within`; whether it came true.
func waitFor(done func() bool, within time.Duration) bool {
	until := time.Now().Add(within)
	for {
		if done() {
			return true
		}
		if time.Now().After(until) {
			return false
		}
		time.Sleep(killPoll)
	}
}

func (a *Agent) sendProc(id int64, p *proc, body []byte, dropped int64, wasRunning bool) {
	reply := protocol.NewProcessReply()
	a.procs.mu.Lock()
	reply.Process = p.describeLocked()
	a.procs.mu.Unlock()
	reply.DroppedBytes, reply.WasRunning = dropped, wasRunning
	a.send(&reply, id, body)
}

// findProc is the process of a handle, or nil with the request answered.
func (a *Agent) findProc(id int64, handle string) *proc {
	if p := a.procs.get(handle); p != nil {
		return p
	}
	a.procs.mu.Lock()
	var known []string
	for _, p := range a.procs.procs {
		known = append(known, p.id)
	}
	a.procs.mu.Unlock()
	names := strings.Join(known, ", ")
	if names == "" {
		names = "none"
	}
	shown := []rune(handle)
	if len(shown) > 40 {
		shown = shown[:40]
	}
	a.fail(id, protocol.NotFound, fmt.Sprintf("no background process %s (known handles: %s)",
		pyQuote(string(shown)), names))
	return nil
}

func pyQuote(s string) string { return "'" + s + "'" }

func init() {
	handle("process_list", func(a *Agent, frame *protocol.Frame, _ protocol.Message) {
		reply := protocol.NewProcessListReply()
		a.procs.mu.Lock()
		for _, p := range a.procs.procs {
			reply.Processes = append(reply.Processes, p.describeLocked())
		}
		a.procs.mu.Unlock()
		a.send(&reply, frame.ID, nil)
	})
	handle("process_output", func(a *Agent, frame *protocol.Frame, m protocol.Message) {
		p := a.findProc(frame.ID, m.(*protocol.ProcessOutput).ProcessID)
		if p == nil {
			return
		}
		a.procs.mu.Lock()
		alive := !p.gone
		a.procs.mu.Unlock()
		data, dropped := p.ring.read(alive)
		a.sendProc(frame.ID, p, data, dropped, true)
	})
	handle("process_input", func(a *Agent, frame *protocol.Frame, m protocol.Message) {
		p := a.findProc(frame.ID, m.(*protocol.ProcessInput).ProcessID)
		if p == nil {
			return
		}
		written, open, err := p.call.terminal.typeIn(frame.Body)
		if !open {
			why := "has no terminal"
			if p.call.request.Tty {
				why = "has ended"
			}
			a.fail(frame.ID, protocol.InvalidArguments, fmt.Sprintf("background process %s %s: "+
				"type only into a running one started by shell with background: true and tty: true",
				p.id, why))
			return
		}
		if errno, ok := err.(syscall.Errno); ok {
			a.fail(frame.ID, protocol.InvalidArguments, "its terminal is closed: "+strerror(errno))
			return
		}
		reply := protocol.NewInputWritten()
		reply.Written = int64(written)
		a.send(&reply, frame.ID, nil)
	})
	handle("process_kill", func(a *Agent, frame *protocol.Frame, m protocol.Message) {
		p := a.findProc(frame.ID, m.(*protocol.ProcessKill).ProcessID)
		if p == nil {
			return
		}
		a.procs.mu.Lock()
		alive := !p.gone
		if alive {
			p.waiters = append(p.waiters, frame.ID)
		}
		a.procs.mu.Unlock()
		if !alive {
			a.sendProc(frame.ID, p, nil, 0, false)
			return
		}
		select {
		case p.kill <- struct{}{}:
		default: // being killed already: answered with the others
		}
	})
	handle("stop_leftovers", func(a *Agent, frame *protocol.Frame, _ protocol.Message) {
		go func() {
			reply := protocol.NewLeftoversStopped()
			reply.Processes = int64(a.stopLeftovers())
			a.send(&reply, frame.ID, nil)
			a.spareWhenIdle() // the one it dropped: the next idle moment starts another
		}()
	})
}
