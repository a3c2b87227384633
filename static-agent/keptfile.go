package main

// Cgroup counters read before and after every call (healing's pressure, the
// OOM-kill counter): each kept open, one descriptor per file, and read again
// from offset 0. A cgroup file is a seq_file that is generated anew by a read
// at offset 0 (v1 and v2), so one pread costs what open, fstat, read and
// close cost together.

import (
	"errors"
	"os"
	"sync"
	"syscall"
)

// keptFdFloor keeps the kept descriptors above those a command's launcher is
// handed (0, 1, 2, the report pipe and the state channel's).
const keptFdFloor = 10

// keptFile is one file opened on its first read and kept open; a file that
// does not exist (gVisor shows no cgroup files, v1 and v2 differ in names)
// is remembered as missing.
type keptFile struct {
	path    string
	mu      sync.Mutex
	fd      int
	missing bool
}

func newKeptFile(path string) *keptFile { return &keptFile{path: path, fd: -1} }

// read is the file's whole content, as os.ReadFile gives it.
func (f *keptFile) read() ([]byte, error) {
	fd, err := f.open()
	if err != nil {
		return nil, err
	}
	// Counters are a few lines: one pread at 0 reads them whole.
	buf := make([]byte, 512)
	for {
		n, err := syscall.Pread(fd, buf, 0)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return nil, err
		}
		if n < len(buf) {
			return buf[:n], nil
		}
		return os.ReadFile(f.path) // larger than expected: read it the long way
	}
}

func (f *keptFile) open() (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fd >= 0 {
		return f.fd, nil
	}
	if f.missing {
		return -1, os.ErrNotExist
	}
	fd, err := syscall.Open(f.path, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		// Any other failure (no descriptor left) is tried again next time.
		f.missing = errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ENOTDIR)
		return -1, err
	}
	high, err := dupCloexecFrom(fd, keptFdFloor)
	_ = syscall.Close(fd)
	if err != nil {
		return -1, err
	}
	f.fd = high
	return high, nil
}

// dupCloexecFrom duplicates fd to the lowest free descriptor >= floor,
// close-on-exec.
func dupCloexecFrom(fd, floor int) (int, error) {
	high, _, errno := syscall.Syscall(syscall.SYS_FCNTL, uintptr(fd), syscall.F_DUPFD_CLOEXEC, uintptr(floor))
	if errno != 0 {
		return -1, errno
	}
	return int(high), nil
}
