package main

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// A kept file is read whole from offset 0 each time, through one
// descriptor above those a launched command is given, closed at exec.
func TestKeptFileRereadsFromTheStart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "pids.current")
	if err := os.WriteFile(path, []byte("7\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	f := newKeptFile(path)
	if n, ok := readCount(f); !ok || n != 7 {
		t.Fatalf("first read: %d %v", n, ok)
	}
	if err := os.WriteFile(path, []byte("12\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if n, ok := readCount(f); !ok || n != 12 {
		t.Fatalf("second read: %d %v", n, ok)
	}
	if f.fd < keptFdFloor {
		t.Fatalf("kept on fd %d, below %d", f.fd, keptFdFloor)
	}
	flags, _, errno := syscall.Syscall(syscall.SYS_FCNTL, uintptr(f.fd), syscall.F_GETFD, 0)
	if errno != 0 || flags&syscall.FD_CLOEXEC == 0 {
		t.Fatalf("fd %d is not close-on-exec (%v)", f.fd, errno)
	}
	_ = syscall.Close(f.fd)
}

// A cgroup file the sandbox lacks reads as unknown, and stays so without
// being looked for again.
func TestKeptFileMissingIsUnknown(t *testing.T) {
	path := filepath.Join(t.TempDir(), "memory.events")
	f := newKeptFile(path)
	if _, ok := readCount(f); ok {
		t.Fatal("a missing file read as known")
	}
	if !f.missing {
		t.Fatal("a missing file was not remembered")
	}
}
