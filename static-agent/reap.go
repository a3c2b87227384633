package main

// The reaper: as PID 1 the agent inherits every orphan of the sandbox and
// must reap it. One goroutine reads every exit status (on each SIGCHLD) and
// hands a command's main process's status to its call; nothing else waits.
// A child is looked at before it is reaped (waitid with WNOWAIT): the shell's
// state report is taken while its sender still exists, which the kernel
// (and gVisor, which otherwise names the sender pid 0) needs to name it.

import (
	"os"
	"os/signal"
	"syscall"
	"unsafe"
)

const (
	pAll     = 0
	wExited  = 4
	wNoWait  = 0x1000000
	siPidAt  = 16 // siginfo_t's si_pid on 64-bit architectures
	siginfoN = 128
)

func (a *Agent) reap() {
	children := make(chan os.Signal, 1)
	signal.Notify(children, syscall.SIGCHLD)
	for range children {
		for a.reapOne() {
		}
	}
}

// reapOne reaps one child that has exited; false when none has.
func (a *Agent) reapOne() bool {
	var info [siginfoN]byte
	_, _, errno := syscall.Syscall6(syscall.SYS_WAITID, pAll, 0, uintptr(unsafe.Pointer(&info[0])),
		syscall.WNOHANG|wExited|wNoWait, 0, 0)
	if errno == syscall.EINTR {
		return true
	}
	pid := int(*(*int32)(unsafe.Pointer(&info[siPidAt])))
	if errno != 0 || pid <= 0 {
		return false
	}
	a.runner.mu.Lock()
	defer a.runner.mu.Unlock()
	hook, tracked := a.runner.exits[pid]
	if tracked {
		hook.before()
	}
	var status syscall.WaitStatus
	for {
		_, err := syscall.Wait4(pid, &status, syscall.WNOHANG, nil)
		if err != syscall.EINTR {
			break
		}
	}
	if tracked {
		delete(a.runner.exits, pid)
		hook.status <- status
	}
	return true
}
