package main

import (
	"syscall"
	"unsafe"
)

// memfd_create's flags (linux/memfd.h).
const (
	mfdCloexec      = 1
	mfdAllowSealing = 2
)

// memfdCreate is an anonymous file that can be sealed, close-on-exec.
func memfdCreate(name string) (int, error) {
	text, err := syscall.BytePtrFromString(name)
	if err != nil {
		return -1, err
	}
	fd, _, errno := syscall.Syscall(sysMemfdCreate, uintptr(unsafe.Pointer(text)), mfdCloexec|mfdAllowSealing, 0)
	if errno != 0 {
		return -1, errno
	}
	return int(fd), nil
}
