package main

// Which processes belong to which call, and stopping a call's whole tree,
// as runtime/agent/tracker.py does: every command starts with a
// supplementary group of its own call (set by the root launcher before it
// drops to the sandbox user), which no process of the sandbox can shed or
// hand out, so /proc/<pid>/status names every process of a call whatever
// it did (setsid, double forks, re-parenting).

import (
	"bufio"
	"bytes"
	"os"
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
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	want := []byte(strconv.FormatUint(uint64(group), 10))
	var found []int
	for _, entry := range entries {
		pid, err := strconv.Atoi(entry.Name())
		if err != nil {
			continue
		}
		status, err := os.ReadFile("/proc/" + entry.Name() + "/status")
		if err != nil {
			continue
		}
		if inGroup(status, want) {
			found = append(found, pid)
		}
	}
	return found
}

func inGroup(status, group []byte) bool {
	scanner := bufio.NewScanner(bytes.NewReader(status))
	zombie, member := false, false
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
	return member && !zombie
}

// stopAndKill stops every process of `group` (and `also`), then kills them
// all: a stopped process cannot fork, so no pass races a new child.
func stopAndKill(group uint32, also ...int) {
	untilNoNew(group, syscall.SIGSTOP, also)
	untilNoNew(group, syscall.SIGKILL, also)
}

// signalTree sends `sig` once to every process of `group` and to `also`.
func signalTree(group uint32, sig syscall.Signal, also ...int) {
	for _, pid := range append(also, members(group)...) {
		_ = syscall.Kill(pid, sig)
	}
}

func untilNoNew(group uint32, sig syscall.Signal, also []int) {
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
			return
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
