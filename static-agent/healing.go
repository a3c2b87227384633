package main

// Sessions that heal: leftovers of earlier calls
// must not fill the sandbox. A call answers when its main process exits;
// what it left running (`server &`, or a fork bomb that outlives its call)
// keeps its call's group (tree.go). When the pids or memory limit is
// (nearly) full — seen before a command starts, when a start fails with
// EAGAIN or ENOMEM, and once a second — the agent stops the runaway
// leftover trees: groups that hold a quarter of the limit or more, newest
// first, one at a time until the pressure is gone. Never a call still
// running (the one being started included); background processes started
// on purpose are stopped only when they are the runaway. The next result's
// note names what was stopped.

import (
	"bytes"
	"errors"
	"fmt"
	"runtime"
	"sort"
	"strconv"
	"sync"
	"syscall"
	"time"
)

const (
	pressurePids   = "pids"
	pressureMemory = "memory"
	// Room a call needs to start (launcher, shell, a pipeline): less is pressure.
	pidsHeadroom   = 8
	memoryPressure = 0.9
	// A leftover holding this share of a limit is a runaway.
	runawayShare = 4
	// Without a readable limit (gVisor hides the cgroup), this many
	// processes in one leftover tree make it a runaway.
	runawayPidsUnknownLimit = 64
	healEvery               = time.Second
	// How long stopped trees get to be reaped before a start is retried.
	healReapWait = 2 * time.Second
	// Descriptions of calls kept to name them in notes.
	healLabelsMax = 4096
)

// cgroupFiles: (limit, current) per kind, cgroup v1 then v2; kept open.
var cgroupFiles = map[string][][2]*keptFile{
	pressurePids: {
		{newKeptFile("/sys/fs/cgroup/pids/pids.max"), newKeptFile("/sys/fs/cgroup/pids/pids.current")},
		{newKeptFile("/sys/fs/cgroup/pids.max"), newKeptFile("/sys/fs/cgroup/pids.current")},
	},
	pressureMemory: {
		{newKeptFile("/sys/fs/cgroup/memory/memory.limit_in_bytes"), newKeptFile("/sys/fs/cgroup/memory/memory.usage_in_bytes")},
		{newKeptFile("/sys/fs/cgroup/memory.max"), newKeptFile("/sys/fs/cgroup/memory.current")},
	},
}

func readCount(file *keptFile) (int64, bool) {
	data, err := file.read()
	if err != nil {
		return 0, false
	}
	n, err := strconv.ParseInt(string(bytes.TrimSpace(data)), 10, 64)
	return n, err == nil && n >= 0
}

// usage is the sandbox cgroup's limit and current use of `kind`; a limit
// of 0 where none is known ("max", or no cgroup files).
func usage(kind string) (limit int64, current int64, known bool) {
	for _, files := range cgroupFiles[kind] {
		if current, ok := readCount(files[1]); ok {
			limit, ok := readCount(files[0])
			// cgroup v1 says "no limit" with a huge number.
			if !ok || limit >= 1<<60 {
				limit = 0
			}
			return limit, current, true
		}
	}
	return 0, 0, false
}

// pressure names the limit that is (nearly) full, if one is.
func pressure() string {
	if limit, current, ok := usage(pressurePids); ok && limit > 0 && current+pidsHeadroom > limit {
		return pressurePids
	}
	if limit, current, ok := usage(pressureMemory); ok && limit > 0 &&
		float64(current) >= float64(limit)*memoryPressure {
		return pressureMemory
	}
	return ""
}

// shortOf is the limit a failed start ran into, if its error says one.
func shortOf(err error) string {
	switch {
	case errors.Is(err, syscall.EAGAIN):
		return pressurePids
	case errors.Is(err, syscall.ENOMEM):
		return pressureMemory
	}
	return ""
}

// healer remembers which call each group was and the notes not yet given
// to a result; one relief runs at a time.
type healer struct {
	relieving sync.Mutex
	mu        sync.Mutex
	labels    map[uint32]string
	notes     []string
}

func newHealer() *healer { return &healer{labels: map[uint32]string{}} }

func (h *healer) started(group uint32, callID string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.labels[group] = "call " + pyQuote(callID)
	if len(h.labels) > healLabelsMax {
		old := make([]uint32, 0, len(h.labels))
		for g := range h.labels {
			old = append(old, g)
		}
		sort.Slice(old, func(i, j int) bool { return old[i] < old[j] })
		for _, g := range old[:healLabelsMax/2] {
			delete(h.labels, g)
		}
	}
}

func (h *healer) label(group uint32) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	if label, ok := h.labels[group]; ok {
		return label
	}
	return fmt.Sprintf("group %d", group)
}

func (h *healer) note(text string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.notes = append(h.notes, text)
}

// takeNotes hands the waiting notes to one result.
func (h *healer) takeNotes() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	notes := h.notes
	h.notes = nil
	return notes
}

// groupUse is what one call group holds: processes (zombies included) and
// resident bytes.
type groupUse struct {
	count int64
	rss   int64
}

// groupCensus is every call group's use (tracker.census).
func groupCensus() map[uint32]groupUse {
	found := map[uint32]groupUse{}
	forEachStatus(func(_ int, status []byte) {
		var held int64
		if fields := bytes.Fields(statusField(status, "VmRSS:")); len(fields) > 0 {
			if kib, err := strconv.ParseInt(string(fields[0]), 10, 64); err == nil {
				held = kib * 1024
			}
		}
		for _, g := range groupsOf(status) {
			if g >= groupBase {
				use := found[g]
				use.count++
				use.rss += held
				found[g] = use
			}
		}
	})
	return found
}

// statusField is the value of one /proc/PID/status line.
func statusField(status []byte, key string) []byte {
	for _, line := range bytes.Split(status, []byte("\n")) {
		if value, ok := cutPrefix(line, []byte(key)); ok {
			return value
		}
	}
	return nil
}

// relieve stops runaway leftover trees while `kind` is under pressure;
// whether any was stopped (its note waits in the healer). Groups of running
// calls and `alsoKeep` are never stopped.
func (a *Agent) relieve(kind string, alsoKeep ...uint32) bool {
	// Taken even without pressure: a call starting while a relief is under
	// way waits for it, so the note naming what it stopped is this call's
	// to give (the relief may have lifted the pressure it looks for).
	a.healer.relieving.Lock()
	defer a.healer.relieving.Unlock()
	if kind == "" {
		return false
	}
	keep := map[uint32]bool{}
	for _, g := range alsoKeep {
		keep[g] = true
	}
	a.mu.Lock()
	for _, call := range a.calls {
		keep[call.group] = true
	}
	for _, p := range a.programs {
		keep[p.call.group] = true
	}
	a.mu.Unlock()
	onPurpose := a.procs.liveGroups()
	limit, _, _ := usage(kind)
	threshold := limit / runawayShare
	if limit == 0 {
		threshold = 0
		if kind == pressurePids {
			threshold = runawayPidsUnknownLimit
		}
	}
	if threshold == 0 {
		return false
	}
	census := groupCensus()
	var runaways []uint32
	for group, use := range census {
		held := use.rss
		if kind == pressurePids {
			held = use.count
		}
		if !keep[group] && held >= threshold {
			runaways = append(runaways, group)
		}
	}
	// Groups grow: newest first.
	sort.Slice(runaways, func(i, j int) bool { return runaways[i] > runaways[j] })
	stopped := false
	for _, group := range runaways {
		use := census[group]
		killed := stopAndKill(group)
		waitFor(func() bool { return present(group) == 0 }, healReapWait)
		held := fmt.Sprintf("%d processes", use.count)
		if kind == pressureMemory {
			held = fmt.Sprintf("%d MiB", use.rss>>20)
		}
		kept := ""
		if onPurpose[group] {
			kept = " (a background process)"
		}
		a.healer.note(fmt.Sprintf("the %s limit was nearly full: stopped %d leftover processes "+
			"of %s%s, which held %s", kind, killed, a.healer.label(group), kept, held))
		stopped = true
		if pressure() != kind {
			break
		}
	}
	return stopped
}

// watchPressure looks at the limits once a second, so runaways are gone
// within seconds even when no call comes.
func (a *Agent) watchPressure() {
	for range time.Tick(healEvery) {
		a.relieve(pressure())
	}
}

// spareThreads: threads the Go runtime keeps idle for the agent. When a
// goroutine blocks in a system call the runtime hands the processor to
// another thread, creating one when none is idle; a creation refused
// (a sandbox whose pids limit its leftovers filled) is fatal to the whole
// agent. Threads made at start and left idle are reused instead: the
// agent's blocking calls at once stay below this count.
const spareThreads = 12

// reserveThreads makes the runtime create `n` threads now, while the pids
// limit has room, and leaves them idle: n goroutines are each locked to a
// thread of their own at once, then released.
func reserveThreads(n int) {
	var locked, done sync.WaitGroup
	release := make(chan struct{})
	locked.Add(n)
	done.Add(n)
	for i := 0; i < n; i++ {
		go func() {
			runtime.LockOSThread()
			locked.Done()
			<-release
			runtime.UnlockOSThread()
			done.Done()
		}()
	}
	locked.Wait()
	close(release)
	done.Wait()
}
