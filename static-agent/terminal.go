package main

// Pseudo-terminals for programs (a Spawn with
// tty) and background commands (an Exec with tty): the master side stays
// with the agent, the slave becomes the command's stdin, stdout and stderr,
// and its launcher makes it the controlling terminal (TIOCSCTTY, spawn.c).
// Without cgo there is no openpty(3): /dev/ptmx is opened and unlocked by
// hand, as the C library does.

import (
	"fmt"
	"sync"
	"syscall"
	"unsafe"
)

// openTerminal is a new pseudo-terminal (master, slave), both close-on-exec,
// its window rows x cols when both are given.
func openTerminal(rows, cols int64) (int, int, error) {
	master, err := syscall.Open("/dev/ptmx", syscall.O_RDWR|syscall.O_NOCTTY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return -1, -1, err
	}
	var unlock, number int32
	if err := ioctl(master, syscall.TIOCSPTLCK, unsafe.Pointer(&unlock)); err != nil {
		_ = syscall.Close(master)
		return -1, -1, err
	}
	if err := ioctl(master, syscall.TIOCGPTN, unsafe.Pointer(&number)); err != nil {
		_ = syscall.Close(master)
		return -1, -1, err
	}
	slave, err := syscall.Open(fmt.Sprintf("/dev/pts/%d", number),
		syscall.O_RDWR|syscall.O_NOCTTY|syscall.O_CLOEXEC, 0)
	if err != nil {
		_ = syscall.Close(master)
		return -1, -1, err
	}
	if rows > 0 && cols > 0 {
		if err := setWindow(master, rows, cols); err != nil {
			_ = syscall.Close(master)
			_ = syscall.Close(slave)
			return -1, -1, err
		}
	}
	return master, slave, nil
}

// setWindow sets a terminal's window size; the kernel signals SIGWINCH to
// its foreground process group when it changes.
func setWindow(fd int, rows, cols int64) error {
	clamp := func(n int64) uint16 {
		if n > 0xFFFF {
			return 0xFFFF
		}
		if n < 0 {
			return 0
		}
		return uint16(n)
	}
	size := [4]uint16{clamp(rows), clamp(cols), 0, 0}
	return ioctl(fd, syscall.TIOCSWINSZ, unsafe.Pointer(&size))
}

// foregroundGroup is the terminal's foreground process group (0: none known).
func foregroundGroup(fd int) int {
	var group int32
	if ioctl(fd, syscall.TIOCGPGRP, unsafe.Pointer(&group)) != nil {
		return 0
	}
	return int(group)
}

func ioctl(fd int, request uintptr, arg unsafe.Pointer) error {
	_, _, errno := syscall.Syscall(syscall.SYS_IOCTL, uintptr(fd), request, uintptr(arg))
	if errno != 0 {
		return errno
	}
	return nil
}

// keyboard is a copy of a terminal's master side that is typed into: the
// master is read elsewhere, and closing this one leaves the reading alone.
// Nil-safe: a command without a terminal has none.
type keyboard struct {
	mu sync.Mutex
	fd int // -1 once closed
}

// newKeyboard is a non-blocking copy of `master` to type into.
func newKeyboard(master int) (*keyboard, error) {
	fd, err := dupCloexec(master)
	if err != nil {
		return nil, err
	}
	if err := syscall.SetNonblock(fd, true); err != nil {
		_ = syscall.Close(fd)
		return nil, err
	}
	return &keyboard{fd: fd}, nil
}

func dupCloexec(fd int) (int, error) { return dupCloexecFrom(fd, 0) }

// typeIn writes what the terminal takes now of data, never waiting; how
// much. open is false once the keyboard is closed (or there is none).
func (k *keyboard) typeIn(data []byte) (written int, open bool, err error) {
	if k == nil {
		return 0, false, nil
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.fd < 0 {
		return 0, false, nil
	}
	for written < len(data) {
		n, err := syscall.Write(k.fd, data[written:])
		if err == syscall.EINTR {
			continue
		}
		if err == syscall.EAGAIN {
			break
		}
		if err != nil {
			return written, true, err
		}
		written += n
	}
	return written, true, nil
}

// resize sets the window of the keyboard's terminal (nothing once closed).
func (k *keyboard) resize(rows, cols int64) {
	if k == nil {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.fd >= 0 {
		_ = setWindow(k.fd, rows, cols)
	}
}

// foreground is its terminal's foreground process group (0: none known).
func (k *keyboard) foreground() int {
	if k == nil {
		return 0
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.fd < 0 {
		return 0
	}
	return foregroundGroup(k.fd)
}

// close ends the typing: nothing more goes into the terminal.
func (k *keyboard) close() {
	if k == nil {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.fd >= 0 {
		_ = syscall.Close(k.fd)
		k.fd = -1
	}
}
