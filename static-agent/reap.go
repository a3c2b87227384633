package main

// The reaper: as PID 1 the agent inherits every orphan of the sandbox and
// must reap it. One goroutine reads every exit status (on each SIGCHLD) and
// hands a command's main process's status to its call; nothing else waits.

import (
	"os"
	"os/signal"
	"syscall"
)

func (a *Agent) reap() {
	children := make(chan os.Signal, 1)
	signal.Notify(children, syscall.SIGCHLD)
	for range children {
		for {
			var status syscall.WaitStatus
			a.runner.mu.Lock()
			pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil)
			if err == syscall.EINTR {
				a.runner.mu.Unlock()
				continue
			}
			if err != nil || pid <= 0 {
				a.runner.mu.Unlock()
				break
			}
			if hook, ok := a.runner.exits[pid]; ok {
				delete(a.runner.exits, pid)
				hook.before()
				hook.status <- status
			}
			a.runner.mu.Unlock()
		}
	}
}
