package main

// The agent's timer slack. Go's scheduler monitor (sysmon) sleeps 20 µs at a
// time for a millisecond or more whenever the agent leaves idle, which under
// a steady load (a call every few milliseconds) is all the time: about forty
// wakeups a call, an eighth of the agent's CPU per call, measured. Those
// sleeps are timers, and a thread's timer slack is how late the kernel may
// fire its timers: with a millisecond of slack the monitor wakes about once a
// millisecond. A thread's slack is copied to the threads and processes it
// creates and kept across execve; the monitor starts before main, so the agent
// raises its slack and executes itself again once. Commands must not inherit
// it (a `sleep 0.001` would oversleep): the launcher gives each the slack the
// agent was started with. Where the kernel has no timer slack (gVisor), or
// anything fails, the agent runs as it started.

import (
	"os"
	"strconv"
	"syscall"
)

const (
	prSetTimerslack = 29
	prGetTimerslack = 30
	// agentTimerSlackNs is the agent's own: a millisecond, far below any of
	// its deadlines (milliseconds to hours) and the monitor's longest sleep
	// (10 ms).
	agentTimerSlackNs = 1_000_000
	// startSlackEnv carries the slack the agent started with across its
	// re-execution (read and removed at once; commands never see the
	// agent's environment).
	startSlackEnv = "TOOLRT_AGENT_START_SLACK"
	// keepSlack tells the launcher to leave the slack as inherited.
	keepSlack = "-"
)

// slackenTimers raises the agent's timer slack (executing itself again, at
// most once) and returns what the launcher gives commands: the slack the
// agent started with, or keepSlack when the agent's own was not changed.
func slackenTimers() string {
	started, carried := os.LookupEnv(startSlackEnv)
	_ = os.Unsetenv(startSlackEnv)
	current, ok := timerSlack()
	if !ok {
		return keepSlack
	}
	commands, raise := slackPlan(started, carried, current)
	if !raise || !setTimerSlack(agentTimerSlackNs) {
		return commands
	}
	// By its path, not /proc/self/exe: that would make "exe" the process's
	// name (ps, /proc/1/comm), not toolrt-agent.
	if self, err := os.Executable(); err == nil {
		env := append(os.Environ(), startSlackEnv+"="+strconv.FormatUint(current, 10))
		_ = syscall.Exec(self, os.Args, env) // returns only when it fails
	}
	// Still here: the agent runs as it is, this thread's slack put back.
	setTimerSlack(current)
	return keepSlack
}

// slackPlan: what commands get, and whether to raise the slack and execute
// again, from the carried start slack (if any) and this thread's slack.
func slackPlan(started string, carried bool, current uint64) (string, bool) {
	if carried && current == agentTimerSlackNs {
		// Believed only below the agent's own (what it carries always is)
		// and when this process has the slack the agent sets: an image's
		// ENV could name the variable too.
		if n, err := strconv.ParseUint(started, 10, 63); err == nil && n > 0 && n < agentTimerSlackNs {
			return started, false
		}
	}
	if current >= agentTimerSlackNs {
		return keepSlack, false
	}
	return keepSlack, true
}

func timerSlack() (uint64, bool) {
	n, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, prGetTimerslack, 0, 0)
	if errno != 0 || int64(n) <= 0 {
		return 0, false
	}
	return uint64(n), true
}

func setTimerSlack(ns uint64) bool {
	_, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, prSetTimerslack, uintptr(ns), 0)
	return errno == 0
}
