package main

// File operations, done as the sandbox user: the
// agent is root without DAC_OVERRIDE; each operation runs on a thread of
// its own whose effective ids are the sandbox user's, so permissions and
// ownership are those of a command the user runs. Paths arrive resolved
// (and checked by the daemon's allowlist) and are opened by walking from /
// one component at a time with O_NOFOLLOW, so a symlink swapped in after
// the check makes the operation fail instead of being followed.

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"

	"toolrt/agent/protocol"
)

const (
	dirFlags    = oPath | syscall.O_DIRECTORY | syscall.O_NOFOLLOW | syscall.O_CLOEXEC
	windowChunk = 64 << 10
	nameMax     = 255
	pathMax     = 4096
	oPath       = 0x200000 // O_PATH (the syscall package lacks it; the same on x86-64 and arm64)
)

// opError is a failure with an agent error code.
type opError struct {
	code, message string
	// A symbolic link on the path stopped the walk (an exact Write then
	// answers resolve_first instead of failing).
	link bool
}

func (e *opError) Error() string { return e.message }

func failWith(code, format string, args ...any) *opError {
	return &opError{code: code, message: fmt.Sprintf(format, args...)}
}

func failureOf(err error) *protocol.Failure {
	f := protocol.NewFailure()
	if oe, ok := err.(*opError); ok {
		f.Code, f.Message = oe.code, oe.message
	} else {
		f.Code, f.Message = protocol.Internal, err.Error()
	}
	return &f
}

func firstErrno(errs ...syscall.Errno) syscall.Errno {
	for _, e := range errs {
		if e != 0 {
			return e
		}
	}
	return 0
}

func codeOf(errno syscall.Errno) string {
	switch errno {
	case syscall.ENOENT:
		return protocol.NotFound
	case syscall.ENOSPC, syscall.EDQUOT, syscall.EFBIG, syscall.ENOMEM:
		return protocol.LimitExceeded
	case syscall.EACCES, syscall.EPERM, syscall.EROFS, syscall.ELOOP:
		return protocol.PathDenied
	case syscall.EISDIR, syscall.ENOTDIR, syscall.ENOTEMPTY, syscall.EEXIST, syscall.ENAMETOOLONG:
		return protocol.InvalidArguments
	}
	return protocol.Internal
}

func osFailure(err error, path string) error {
	errno, ok := underlyingErrno(err)
	if !ok {
		return failWith(protocol.Internal, "%s: %v", shown(path), err)
	}
	reason := map[syscall.Errno]string{
		syscall.ENOENT:       "no such file or directory",
		syscall.EACCES:       "permission denied for the sandbox user",
		syscall.EPERM:        "operation not permitted for the sandbox user",
		syscall.EROFS:        "read-only filesystem (only /workspace and /tmp are writable)",
		syscall.ENOSPC:       "no space left (the workspace size limit is reached)",
		syscall.EFBIG:        "file too large",
		syscall.EISDIR:       "is a directory",
		syscall.ENOTDIR:      "not a directory",
		syscall.ELOOP:        "a symbolic link appeared in the path after it was checked",
		syscall.ENAMETOOLONG: fmt.Sprintf("name too long (at most %d bytes per file name, %d per path)", nameMax, pathMax-1),
	}[errno]
	if reason == "" {
		reason = errno.Error()
	}
	return failWith(codeOf(errno), "%s: %s", shown(path), reason)
}

func underlyingErrno(err error) (syscall.Errno, bool) {
	for err != nil {
		if errno, ok := err.(syscall.Errno); ok {
			return errno, true
		}
		u, ok := err.(interface{ Unwrap() error })
		if !ok {
			return 0, false
		}
		err = u.Unwrap()
	}
	return 0, false
}

func shown(path string) string {
	if len(path) <= 300 {
		return path
	}
	return path[:200] + "..." + path[len(path)-80:]
}

func components(path string) ([]string, error) {
	if !strings.HasPrefix(path, "/") || strings.ContainsRune(path, 0) {
		return nil, failWith(protocol.InvalidArguments, "%q: expected an absolute path", path)
	}
	var parts []string
	for _, p := range strings.Split(path, "/") {
		if p == "." || p == ".." {
			return nil, failWith(protocol.PathDenied, "%s: expected a resolved path", path)
		}
		if p != "" {
			parts = append(parts, p)
		}
	}
	return parts, nil
}

// openDir is an O_PATH fd of directory `path`, walked from / without
// following a link, creating what is missing when asked.
func openDir(path string, create bool) (int, error) {
	parts, err := components(path)
	if err != nil {
		return -1, err
	}
	fd, err := syscall.Open("/", dirFlags, 0)
	if err != nil {
		return -1, osFailure(err, path)
	}
	for _, name := range parts {
		next, err := syscall.Openat(fd, name, dirFlags, 0)
		if err == syscall.ENOENT && create {
			if err = syscall.Mkdirat(fd, name, 0o755); err == nil || err == syscall.EEXIST {
				next, err = syscall.Openat(fd, name, dirFlags, 0)
			}
		}
		if err != nil {
			explained := explainWalk(err, fd, name, path)
			syscall.Close(fd)
			return -1, explained
		}
		syscall.Close(fd)
		fd = next
	}
	return fd, nil
}

func explainWalk(err error, fd int, name, path string) error {
	if err == syscall.ELOOP || err == syscall.ENOTDIR {
		var st syscall.Stat_t
		if lstatAt(fd, name, &st) != nil {
			return osFailure(err, path)
		}
		if st.Mode&syscall.S_IFMT == syscall.S_IFLNK {
			linked := failWith(protocol.PathDenied, "%s: a symbolic link appeared in the path after it was checked", path)
			linked.link = true
			return linked
		}
		return failWith(protocol.NotFound, "%s: %q is not a directory", path, name)
	}
	return osFailure(err, path)
}

func openParent(path string, create bool) (int, string, error) {
	parts, err := components(path)
	if err != nil {
		return -1, "", err
	}
	if len(parts) == 0 {
		return -1, "", failWith(protocol.InvalidArguments, "/: expected a file path, not the root")
	}
	fd, err := openDir("/"+strings.Join(parts[:len(parts)-1], "/"), create)
	return fd, parts[len(parts)-1], err
}

func openFile(path string, flags int) (int, error) {
	parent, name, err := openParent(path, false)
	if err != nil {
		return -1, err
	}
	defer syscall.Close(parent)
	fd, err := syscall.Openat(parent, name, flags|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
	if err != nil {
		return -1, explainWalk(err, parent, name, path)
	}
	return fd, nil
}

func kindOf(mode uint32) string {
	switch mode & syscall.S_IFMT {
	case syscall.S_IFREG:
		return "file"
	case syscall.S_IFDIR:
		return "dir"
	case syscall.S_IFLNK:
		return "symlink"
	}
	return "other"
}

// realpath resolves symbolic links and `..` as posixpath.realpath does
// (not strict: what does not exist is kept as written).
func realpath(path string) string {
	if !strings.HasPrefix(path, "/") {
		path = "/workspace/" + path
	}
	resolved, _ := walkLinks("/", path, 0)
	return resolved
}

func walkLinks(base, rest string, depth int) (string, bool) {
	current := base
	for _, name := range strings.Split(rest, "/") {
		switch name {
		case "", ".":
			continue
		case "..":
			current = parentOf(current)
			continue
		}
		next := joinPath(current, name)
		target, err := os.Readlink(next)
		if err != nil {
			current = next
			continue
		}
		if depth > 40 {
			// A loop: keep the rest as written, as Python does.
			current = next
			continue
		}
		start := current
		if strings.HasPrefix(target, "/") {
			start = "/"
		}
		current, _ = walkLinks(start, target, depth+1)
	}
	return current, true
}

func parentOf(path string) string {
	at := strings.LastIndexByte(path, '/')
	if at <= 0 {
		return "/"
	}
	return path[:at]
}

func joinPath(dir, name string) string {
	if dir == "/" {
		return "/" + name
	}
	return dir + "/" + name
}

// -- operations ---------------------------------------------------------------

func init() {
	handle("resolve", fileOp(func(m protocol.Message, _ []byte) (protocol.Message, []byte, error) {
		reply := protocol.NewResolved()
		for _, path := range m.(*protocol.Resolve).Paths {
			item := protocol.NewResolvedPath()
			item.Path = realpath(path)
			var st syscall.Stat_t
			if syscall.Lstat(item.Path, &st) == nil {
				item.Type = kindOf(st.Mode)
			}
			reply.Resolved = append(reply.Resolved, item)
		}
		return &reply, nil, nil
	}))
	handle("read", func(a *Agent, frame *protocol.Frame, m protocol.Message) {
		redactor := a.redactor.get()
		fileOp(func(m protocol.Message, _ []byte) (protocol.Message, []byte, error) {
			request := *m.(*protocol.Read)
			reply, body, err := readResolved(&request)
			if err != nil || !request.Redact {
				return reply, body, err
			}
			// A read cut at its byte cap may end inside a secret: that piece goes too.
			return reply, redactor.redact(body, false, reply.(*protocol.ReadReply).Truncated), nil
		})(a, frame, m)
	})
	// A write with a call id is answered like a command: kept until an Ack,
	// and a resumed one gets the kept answer instead of writing again.
	handle("write", func(a *Agent, frame *protocol.Frame, m protocol.Message) {
		request := m.(*protocol.Write)
		if a.resumed(frame.ID, frame.Epoch, request.CallID, request.Resume) {
			return
		}
		a.starting(request.CallID)
		go func() {
			var reply protocol.Message
			var body []byte
			err := asRequester(request, func() (err error) {
				reply, body, err = write(request.Path, frame.Body, request.Exact)
				return err
			})
			if err != nil {
				reply, body = failureOf(err), nil
			}
			if written, ok := reply.(*protocol.WriteReply); ok && written.ResolveFirst {
				// Nothing written: not an answer to keep, the daemon writes again.
				a.notStarted(frame.ID, frame.Epoch, request.CallID, reply)
				return
			}
			a.answerCall(frame.ID, frame.Epoch, request.CallID, reply, body)
		}()
	})
	handle("unlink", fileOp(func(m protocol.Message, _ []byte) (protocol.Message, []byte, error) {
		path := m.(*protocol.Unlink).Path
		parent, name, err := openParent(path, false)
		if err != nil {
			return nil, nil, err
		}
		defer syscall.Close(parent)
		if err := syscall.Unlinkat(parent, name); err != nil && err != syscall.ENOENT {
			return nil, nil, osFailure(err, path)
		}
		done := protocol.NewDone()
		return &done, nil, nil
	}))
}

type fileFn func(request protocol.Message, body []byte) (protocol.Message, []byte, error)

// fileOp runs fn as the user the request names (asRequester; the model's
// file tools name none: the sandbox user) on a goroutine of its own and
// answers.
func fileOp(fn fileFn) Handler {
	return func(a *Agent, frame *protocol.Frame, request protocol.Message) {
		go func() {
			var reply protocol.Message
			var body []byte
			err := asRequester(request, func() (err error) {
				reply, body, err = fn(request, frame.Body)
				return err
			})
			if err != nil {
				a.send(failureOf(err), frame.ID, nil)
				return
			}
			a.send(reply, frame.ID, body)
		}()
	}
}

// readResolved is read, of the path resolved first when the request asks:
// then a failure of the read travels in the reply, for the daemon's
// allowlist to see the path first.
func readResolved(request *protocol.Read) (protocol.Message, []byte, error) {
	if !request.Resolve {
		return read(request)
	}
	request.Path = realpath(request.Path)
	reply, body, err := read(request)
	if err != nil {
		failed := protocol.NewReadReply()
		failed.Path, failed.Failure = request.Path, failureOf(err)
		return &failed, nil, nil
	}
	reply.(*protocol.ReadReply).Path = request.Path
	return reply, body, nil
}

func read(request *protocol.Read) (protocol.Message, []byte, error) {
	path := request.Path
	// Non-blocking, so that a FIFO cannot stall the operation; anything
	// but a regular file is refused before it is read.
	fd, err := openFile(path, syscall.O_RDONLY|syscall.O_NONBLOCK)
	if err != nil {
		return nil, nil, err
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		return nil, nil, osFailure(err, path)
	}
	switch st.Mode & syscall.S_IFMT {
	case syscall.S_IFDIR:
		return nil, nil, failWith(protocol.InvalidArguments, "%s: is a directory; use list_files", path)
	case syscall.S_IFREG:
	default:
		return nil, nil, failWith(protocol.InvalidArguments, "%s: not a regular file", path)
	}
	reply := protocol.NewReadReply()
	reply.Size, reply.Links = st.Size, int64(st.Nlink)
	if request.Raw {
		data, err := io.ReadAll(io.LimitReader(f, request.MaxBytes+1))
		if err != nil {
			return nil, nil, osFailure(err, path)
		}
		if int64(len(data)) > request.MaxBytes {
			return nil, nil, failWith(protocol.LimitExceeded, "%s: larger than the %d-byte limit", path, request.MaxBytes)
		}
		return &reply, data, nil
	}
	head := make([]byte, 8192)
	n, _ := io.ReadFull(f, head)
	if bytes.IndexByte(head[:n], 0) >= 0 {
		reply.Binary = true
		return &reply, nil, nil
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, nil, osFailure(err, path)
	}
	// A sparse file's holes read as fast as memory: 64 GiB still takes
	// seconds, so the read keeps to its deadline.
	b := newBudget(request.DeadlineS)
	total, truncated, kept, err := lineWindow(f, request.Offset, request.Limit, request.MaxBytes,
		func() error { return b.check("reading the file") })
	if _, timedOut := err.(*opError); timedOut {
		return nil, nil, err
	}
	if err != nil {
		return nil, nil, osFailure(err, path)
	}
	reply.TotalLines, reply.Truncated = total, truncated
	return &reply, kept, nil
}

// lineWindow is lines [first, first+limit) of f (1-based), its line count,
// and whether anything was left out (files._line_window); `check` before
// each chunk ends it early (the deadline).
func lineWindow(f io.Reader, first, limit, maxBytes int64, check func() error) (int64, bool, []byte, error) {
	end := first + limit
	var kept []byte
	line := int64(1)
	newlines := int64(0)
	truncated := false
	lastEndsLine, any := false, false
	pooled := getChunk()
	defer putChunk(pooled)
	chunk := (*pooled)[:windowChunk]
	for {
		if err := check(); err != nil {
			return 0, false, nil, err
		}
		n, err := f.Read(chunk)
		if n > 0 {
			data := chunk[:n]
			any, lastEndsLine = true, data[n-1] == '\n'
			count := int64(bytes.Count(data, []byte("\n")))
			top := line + count
			if line < end && top >= first {
				start, stop := 0, len(data)
				if first > line {
					start = afterNewline(data, first-line)
				}
				if end <= top {
					stop = afterNewline(data, end-line)
				}
				truncated = truncated || stop < len(data)
				piece := data[start:stop]
				if room := maxBytes - int64(len(kept)); int64(len(piece)) > room {
					if room < 0 {
						room = 0
					}
					piece = piece[:room]
					truncated = true
				}
				kept = append(kept, piece...)
			} else if line >= end {
				truncated = true
			}
			line = top
			newlines += count
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return 0, false, nil, err
		}
	}
	total := newlines
	if any && !lastEndsLine {
		total++
	}
	return total, truncated, kept, nil
}

// afterNewline is the offset just after the nth newline of data.
func afterNewline(data []byte, nth int64) int {
	at := 0
	for i := int64(0); i < nth; i++ {
		at += bytes.IndexByte(data[at:], '\n') + 1
	}
	return at
}

// write replaces a file atomically (temporary file and rename), creating
// its parent directories. `exact`: the path is as the daemon checked it,
// not resolved, so a symbolic link anywhere on it (which a resolved path
// would have gone through) writes nothing and answers resolve_first.
func write(path string, data []byte, exact bool) (protocol.Message, []byte, error) {
	resolveFirst := func() (protocol.Message, []byte, error) {
		reply := protocol.NewWriteReply()
		reply.ResolveFirst = true
		return &reply, nil, nil
	}
	parent, name, err := openParent(path, true)
	if err != nil {
		if oe, ok := err.(*opError); ok && oe.link && exact {
			return resolveFirst()
		}
		return nil, nil, err
	}
	defer syscall.Close(parent)
	mode := uint32(0o644)
	var st syscall.Stat_t
	if lstatAt(parent, name, &st) == nil {
		if exact && st.Mode&syscall.S_IFMT == syscall.S_IFLNK {
			return resolveFirst()
		}
		switch st.Mode & syscall.S_IFMT {
		case syscall.S_IFDIR:
			return nil, nil, failWith(protocol.InvalidArguments, "%s: is a directory", path)
		case syscall.S_IFREG:
			mode = st.Mode & 0o7777
		}
	}
	random := make([]byte, 6)
	_, _ = rand.Read(random)
	short := name
	if len(short) > 64 {
		short = short[:64]
	}
	tmp := "." + short + ".toolrt-" + hex.EncodeToString(random) + ".tmp"
	fd, err := syscall.Openat(parent, tmp, syscall.O_WRONLY|syscall.O_CREAT|syscall.O_EXCL|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, mode)
	if err != nil {
		return nil, nil, osFailure(err, path)
	}
	err = writeAll(fd, data)
	if err == nil {
		err = syscall.Fchmod(fd, mode)
	}
	if cerr := syscall.Close(fd); err == nil {
		err = cerr
	}
	if err == nil {
		err = syscall.Renameat(parent, tmp, parent, name)
	}
	if err != nil {
		_ = syscall.Unlinkat(parent, tmp)
		return nil, nil, osFailure(err, path)
	}
	reply := protocol.NewWriteReply()
	reply.BytesWritten = int64(len(data))
	return &reply, nil, nil
}

func writeAll(fd int, data []byte) error {
	for len(data) > 0 {
		n, err := syscall.Write(fd, data)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		data = data[n:]
	}
	return nil
}

// lstatAt is fstatat(dir, name, AT_SYMLINK_NOFOLLOW), which the syscall
// package does not offer on every architecture: an O_PATH descriptor of
// the name itself (a link is not followed) and fstat.
func lstatAt(dir int, name string, st *syscall.Stat_t) error {
	fd, err := syscall.Openat(dir, name, oPath|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer syscall.Close(fd)
	return syscall.Fstat(fd, st)
}
