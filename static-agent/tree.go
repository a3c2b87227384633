package main

// Which processes belong to which call, stopping a call's whole tree and
// what earlier calls left behind (stop_leftovers): every command starts with a
// supplementary group of its own call (set by the root launcher before it
// drops to the sandbox user), which no process of the sandbox can shed or
// hand out, so /proc/<pid>/status names every process of a call whatever
// it did (setsid, double forks, re-parenting).

import (
	"bufio"
	"bytes"
	"os"
	"sort"
	"strconv"
	"strings"
	"syscall"
)

// groupBase: far above the groups images define, and above the highest one
// in /etc/group when an image goes higher (tracker.GROUP_BASE).
const groupBase = 200_000

func firstGroup() uint32 {
	highest := 0
	data, err := os.ReadFile("/etc/group")
	if err == nil {
		for _, line := range strings.Split(string(data), "\n") {
			fields := strings.Split(line, ":")
			if len(fields) > 2 {
				if gid, err := strconv.Atoi(strings.TrimSpace(fields[2])); err == nil && gid > highest {
					highest = gid
				}
			}
		}
	}
	if highest+1 > groupBase {
		return uint32(highest + 1)
	}
	return groupBase
}

// members are the live (not zombie) processes of `group`.
func members(group uint32) []int {
	want := []byte(strconv.FormatUint(uint64(group), 10))
	var found []int
	forEachStatus(func(pid int, status []byte) {
		if member, zombie := inGroup(status, want); member && !zombie {
			found = append(found, pid)
		}
	})
	return found
}

// present counts the processes of `group`, zombies the agent has not yet
// reaped included: a killed tree is gone only at 0 (tracker.count).
func present(group uint32) int {
	want := []byte(strconv.FormatUint(uint64(group), 10))
	n := 0
	forEachStatus(func(pid int, status []byte) {
		if member, _ := inGroup(status, want); member {
			n++
		}
	})
	return n
}

// forEachStatus calls fn with each process's /proc/PID/status.
func forEachStatus(fn func(pid int, status []byte)) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return
	}
	for _, entry := range entries {
		pid, err := strconv.Atoi(entry.Name())
		if err != nil {
			continue
		}
		status, err := os.ReadFile("/proc/" + entry.Name() + "/status")
		if err == nil {
			fn(pid, status)
		}
	}
}

// groupsOf are the supplementary groups a status names.
func groupsOf(status []byte) []uint32 {
	var groups []uint32
	for _, line := range bytes.Split(status, []byte("\n")) {
		if value, ok := cutPrefix(line, []byte("Groups:")); ok {
			for _, field := range bytes.Fields(value) {
				if g, err := strconv.ParseUint(string(field), 10, 32); err == nil {
					groups = append(groups, uint32(g))
				}
			}
		}
	}
	return groups
}

// inGroup: whether a status names `group`, and whether it is a zombie's.
func inGroup(status, group []byte) (member, zombie bool) {
	scanner := bufio.NewScanner(bytes.NewReader(status))
	for scanner.Scan() {
		line := scanner.Bytes()
		if value, ok := cutPrefix(line, []byte("State:")); ok {
			state := bytes.TrimSpace(value)
			zombie = len(state) > 0 && (state[0] == 'Z' || state[0] == 'X')
		}
		if value, ok := cutPrefix(line, []byte("Groups:")); ok {
			for _, g := range bytes.Fields(value) {
				if bytes.Equal(g, group) {
					member = true
				}
			}
		}
	}
	return member, zombie
}

// stopAndKill stops every process of `group` (and `also`), then kills them
// all: a stopped process cannot fork, so no pass races a new child. How
// many were killed.
func stopAndKill(group uint32, also ...int) int {
	stopped := untilNoNew(group, syscall.SIGSTOP, also)
	return max(stopped, untilNoNew(group, syscall.SIGKILL, also))
}

// signalTree sends `sig` once to every process of `group` and to `also`.
func signalTree(group uint32, sig syscall.Signal, also ...int) {
	for _, pid := range append(also, members(group)...) {
		_ = syscall.Kill(pid, sig)
	}
}

func untilNoNew(group uint32, sig syscall.Signal, also []int) int {
	done := map[int]bool{}
	for _, pid := range also {
		_ = syscall.Kill(pid, sig)
		done[pid] = true
	}
	for {
		fresh := 0
		for _, pid := range members(group) {
			if !done[pid] {
				_ = syscall.Kill(pid, sig)
				done[pid] = true
				fresh++
			}
		}
		if fresh == 0 {
			return len(done)
		}
	}
}

// cutPrefix is bytes.CutPrefix (Go 1.20; Debian's Go is 1.19).
func cutPrefix(s, prefix []byte) ([]byte, bool) {
	if !bytes.HasPrefix(s, prefix) {
		return s, false
	}
	return s[len(prefix):], true
}

// stopLeftovers stops every process of a call group but those of running
// calls and live background processes; how many were killed. The waiting
// spare shell is killed first and not counted: it is toolrt's own.
func (a *Agent) stopLeftovers() int {
	spareGroup, dropped := a.dropSpare()
	keep := a.procs.liveGroups()
	if dropped {
		keep[spareGroup] = true
	}
	a.mu.Lock()
	for _, call := range a.calls {
		keep[call.group] = true
	}
	a.mu.Unlock()
	killed := 0
	for _, group := range census() {
		if keep[group] {
			continue
		}
		killed += stopAndKill(group)
		waitFor(func() bool { return len(members(group)) == 0 }, leftoversWait)
	}
	return killed
}

// census is every call group a process of the sandbox carries, in order.
func census() []uint32 {
	seen := map[uint32]bool{}
	forEachStatus(func(_ int, status []byte) {
		for _, g := range groupsOf(status) {
			if g >= groupBase {
				seen[g] = true
			}
		}
	})
	groups := make([]uint32, 0, len(seen))
	for g := range seen {
		groups = append(groups, g)
	}
	sort.Slice(groups, func(i, j int) bool { return groups[i] < groups[j] })
	return groups
}
