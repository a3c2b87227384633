package main

// Files for programs: the stat, read_path and write_path operations (the
// StatPath, ReadFile and WriteFile RPCs). Unlike the model's file tools these take any path in the
// sandbox: the permissions of the user it names (the sandbox user unless
// it names another) are the wall (each runs as that user, asRequester). Failures carry the reasons the RPCs' clients see
// (FILE_NOT_FOUND, ...). A read is never cut: more than max_bytes is
// FILE_TOO_LARGE; the session's secrets are redacted from what it sends. A
// write opens the path as the user, so a read-only file refuses it, and an
// existing file keeps its inode, owner and mode.

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"toolrt/agent/protocol"
)

// How long a read of a special file waits for it at a time.
const specialWait = 50 * time.Millisecond

// programReason is the reason a program's client sees for an errno.
func programReason(errno syscall.Errno) string {
	switch errno {
	case syscall.ENOENT, syscall.ELOOP:
		return protocol.FileNotFound
	case syscall.EACCES, syscall.EPERM, syscall.EROFS:
		return protocol.PermissionDenied
	case syscall.EISDIR:
		return protocol.IsADirectory
	case syscall.ENOTDIR:
		return protocol.NotADirectory
	case syscall.ENOSPC, syscall.EDQUOT:
		return protocol.NoSpace
	case syscall.EFBIG:
		return protocol.FileTooLarge
	case syscall.EEXIST:
		return protocol.FileExists
	case syscall.ENAMETOOLONG, syscall.ENXIO:
		return protocol.InvalidRequest
	}
	return protocol.Internal
}

// programFailure is err with the reason a program's client sees.
func programFailure(err error, path string) error {
	if _, ok := err.(*opError); ok {
		return err
	}
	failure := osFailure(err, path).(*opError)
	// The thread runs as the user asked for: name it (its effective uid).
	if uid := syscall.Geteuid(); uid != protocol.SandboxUid {
		failure.message = strings.Replace(failure.message, "the sandbox user", fmt.Sprintf("uid %d", uid), 1)
	}
	if errno, ok := underlyingErrno(err); ok {
		failure.code = programReason(errno)
	}
	return failure
}

func statPath(request *protocol.Stat) (protocol.Message, []byte, error) {
	reply := protocol.NewStatReply()
	var st syscall.Stat_t
	if err := syscall.Lstat(request.Path, &st); err != nil {
		if err == syscall.ENOENT || err == syscall.ENOTDIR {
			return &reply, nil, nil
		}
		return nil, nil, programFailure(err, request.Path)
	}
	if st.Mode&syscall.S_IFMT == syscall.S_IFLNK {
		target, err := os.Readlink(request.Path)
		if err != nil {
			return nil, nil, programFailure(err, request.Path)
		}
		reply.LinkTarget = target
	}
	reply.Exists = true
	reply.Type = kindOf(st.Mode)
	if reply.Type == "dir" {
		reply.Type = "directory"
	}
	reply.Size = st.Size
	reply.Mode = int64(st.Mode & 0o7777)
	reply.Mtime = float64(st.Mtim.Sec) + float64(st.Mtim.Nsec)/1e9
	return &reply, nil, nil
}

func tooLarge(path string, size int64, request *protocol.ReadPath) error {
	return failWith(protocol.FileTooLarge, "%s: %d bytes or more from offset %d; max_bytes is %d",
		shown(path), size, request.Offset, request.MaxBytes)
}

// readPath emits the file's bytes from offset; FILE_TOO_LARGE past
// max_bytes. A regular file's size is known before a byte is sent; a
// special file (a FIFO, a device, a /proc entry) is read as it comes, for
// at most wait_s, and refused as soon as it passes max_bytes.
func readPath(request *protocol.ReadPath, emit func([]byte) error, b *budget) (*protocol.Transferred, error) {
	path := request.Path
	fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, programFailure(err, path)
	}
	defer syscall.Close(fd)
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		return nil, programFailure(err, path)
	}
	kind := st.Mode & syscall.S_IFMT
	if kind == syscall.S_IFDIR {
		return nil, failWith(protocol.IsADirectory, "%s: is a directory", shown(path))
	}
	regular := kind == syscall.S_IFREG && st.Size > 0
	if regular && st.Size-request.Offset > request.MaxBytes {
		return nil, tooLarge(path, st.Size-request.Offset, request)
	}
	sent, skip := int64(0), max64(0, request.Offset)
	if regular {
		if _, err := syscall.Seek(fd, skip, io.SeekStart); err != nil {
			return nil, programFailure(err, path)
		}
		skip = 0
	}
	giveUp := time.Now().Add(seconds2(request.WaitS))
	timedOut := func(how string) error {
		return failWith(protocol.Timeout, "%s: did not end within %s s%s", shown(path), pyFloat(request.WaitS), how)
	}
	buf := make([]byte, chunkBytes)
	for {
		if err := b.check("reading the file"); err != nil {
			return nil, err
		}
		// A special file is read once it has something to say: a FIFO none
		// has opened for writing yet is not readable (its read would say
		// end-of-file at once), one whose writer left is.
		if !regular && !readable(fd) {
			if time.Now().After(giveUp) {
				return nil, timedOut(" (a FIFO or device whose writer keeps it open, or that nothing writes?)")
			}
			continue
		}
		n, err := syscall.Read(fd, buf)
		if err == syscall.EAGAIN || err == syscall.EINTR {
			time.Sleep(specialWait) // reached only where poll cannot wait (gVisor)
			continue
		}
		if err != nil {
			return nil, programFailure(err, path)
		}
		if n == 0 {
			reply := protocol.NewTransferred()
			reply.Files, reply.Bytes = 1, sent
			return &reply, nil
		}
		data := buf[:n]
		if skip > 0 {
			dropped := min64(skip, int64(len(data)))
			data, skip = data[dropped:], skip-dropped
		}
		if sent+int64(len(data)) > request.MaxBytes {
			return nil, tooLarge(path, sent+int64(len(data)), request)
		}
		if len(data) > 0 {
			if err := emit(append([]byte(nil), data...)); err != nil {
				return nil, err
			}
			sent += int64(len(data))
		}
		if !regular && time.Now().After(giveUp) {
			return nil, timedOut("")
		}
	}
}

// readable: whether a special file has something to say (within specialWait).
func readable(fd int) bool {
	type pollFd struct {
		fd             int32
		events, revent int16
	}
	pfd := pollFd{fd: int32(fd), events: 1} // POLLIN
	ts := syscall.NsecToTimespec(int64(specialWait))
	n, _, errno := syscall.Syscall6(syscall.SYS_PPOLL, uintptr(unsafe.Pointer(&pfd)), 1,
		uintptr(unsafe.Pointer(&ts)), 0, 0, 0)
	if errno != 0 {
		return errno != syscall.EINTR // gVisor refuses to wait on some files: read and see
	}
	return n > 0
}

func writePath(request *protocol.WritePath, source io.Reader, b *budget) (*protocol.Transferred, error) {
	path := request.Path
	var keep int
	switch request.IfExists {
	case "replace":
		keep = syscall.O_TRUNC
	case "append":
		keep = syscall.O_APPEND
	case "fail":
	default:
		return nil, failWith(protocol.InvalidRequest, "if_exists %s: expected one of replace, fail, append",
			pyQuote(clipChars(request.IfExists, 40)))
	}
	mode := uint32(request.Mode & 0o777)
	flags := syscall.O_WRONLY | syscall.O_NONBLOCK | syscall.O_CLOEXEC
	if request.MakeParents {
		parent := filepath.Dir(path)
		if err := os.MkdirAll(parent, 0o777); err != nil {
			if errno, _ := underlyingErrno(err); errno == syscall.ENOTDIR || errno == syscall.EEXIST {
				// Something that is not a directory is in the way.
				return nil, failWith(protocol.NotADirectory, "%s: not a directory", shown(parent))
			}
			return nil, programFailure(err, path)
		}
	}
	fd, err := syscall.Open(path, flags|syscall.O_CREAT|syscall.O_EXCL, mode)
	if err == nil {
		err = syscall.Fchmod(fd, mode) // as asked, whatever the agent's umask
		if err != nil {
			_ = syscall.Close(fd)
		}
	} else if err == syscall.EEXIST && request.IfExists != "fail" {
		fd, err = syscall.Open(path, flags|keep, 0)
	}
	if err != nil {
		return nil, programFailure(err, path)
	}
	defer syscall.Close(fd)
	if err := syscall.SetNonblock(fd, false); err != nil {
		return nil, programFailure(err, path)
	}
	written := int64(0)
	buf := make([]byte, chunkBytes)
	for {
		n, err := source.Read(buf)
		if n > 0 {
			if err := b.check("writing the file"); err != nil {
				return nil, err
			}
			if err := writeAll(fd, buf[:n]); err != nil {
				return nil, programFailure(err, path)
			}
			written += int64(n)
		}
		if err == io.EOF {
			reply := protocol.NewTransferred()
			reply.Files, reply.Bytes = 1, written
			return &reply, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

func init() {
	handle("stat", fileOp(func(m protocol.Message, _ []byte) (protocol.Message, []byte, error) {
		return statPath(m.(*protocol.Stat))
	}))
	handle("read_path", func(a *Agent, frame *protocol.Frame, m protocol.Message) {
		request := m.(*protocol.ReadPath)
		t := &transfer{budget: newBudget(request.DeadlineS), flow: newOutflow(request.Window)}
		// The session's secrets are redacted, as in everything else it shows.
		redacted := redactStream{r: a.redactor.get()}
		send := func(chunk []byte) error {
			if err := t.flow.spend(t.budget); err != nil {
				return err
			}
			event := protocol.NewArchiveChunk()
			a.send(&event, frame.ID, chunk)
			return nil
		}
		emit := func(data []byte) error {
			if data = redacted.feed(data); len(data) > 0 {
				return send(data)
			}
			return nil
		}
		a.runTransfer(frame.ID, request, t, func() (*protocol.Transferred, error) {
			reply, err := readPath(request, emit, t.budget)
			if err != nil {
				return nil, err
			}
			if rest := redacted.flush(); len(rest) > 0 {
				if err := send(rest); err != nil {
					return nil, err
				}
			}
			return reply, nil
		})
	})
	handle("write_path", func(a *Agent, frame *protocol.Frame, m protocol.Message) {
		request := m.(*protocol.WritePath)
		b := newBudget(request.DeadlineS)
		credit := func() { a.credit(frame.ID, frame.Epoch, 1) }
		t := &transfer{budget: b, in: newInflow(request.Window, credit, b)}
		a.runTransfer(frame.ID, request, t, func() (*protocol.Transferred, error) {
			return writePath(request, t.in, b)
		})
	})
}
