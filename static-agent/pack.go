package main

// Tar archives out of the sandbox (downloads, snapshots, diffs) as the
// sandbox user: every path is opened by walking
// from / without following links, and everything below it through
// directory descriptors, so a directory swapped for a symlink while the
// archive is written is never followed out of the tree asked for. Symlinks
// are stored as links; sockets, FIFOs and devices are left out. Text files
// (valid UTF-8) have the session's secrets redacted: one of at most
// redactMaxBytes is read whole and stored with its redacted size, so every
// header is true; a larger one holding a secret is refused. The archive
// streams in chunks of CHUNK_BYTES, at most `window` ahead of the daemon's
// Credits (flow.Outflow), within the request's deadline and its Cancel.

import (
	"archive/tar"
	"fmt"
	"io"
	"os"
	"path"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unicode/utf8"
	"unsafe"

	"toolrt/agent/protocol"
)

const (
	redactMaxBytes = 8 << 20
	chunkBytes     = 1 << 20 // protocol.CHUNK_BYTES
)

// budget is a file operation's deadline and cancellation.
type budget struct {
	seconds   float64
	deadline  time.Time
	cancelled atomic.Bool
}

func newBudget(seconds float64) *budget {
	return &budget{seconds: seconds, deadline: time.Now().Add(seconds2(seconds))}
}

func seconds2(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

func (b *budget) check(doing string) error {
	if b.cancelled.Load() {
		return failWith(protocol.Timeout, "cancelled while %s", doing)
	}
	if time.Now().After(b.deadline) {
		return failWith(protocol.Timeout, "gave up after %s s while %s", pyFloat(b.seconds), doing)
	}
	return nil
}

// pyFloat is Python's "%g" of a number of seconds.
func pyFloat(f float64) string { return strings.TrimSuffix(fmt.Sprintf("%g", f), ".0") }

// outflow is an Archive's credits: chunks the daemon has room for.
type outflow struct {
	mu      sync.Mutex
	ready   *sync.Cond
	credits int64
}

func newOutflow(window int64) *outflow {
	f := &outflow{credits: window}
	if f.credits < 1 {
		f.credits = 1
	}
	f.ready = sync.NewCond(&f.mu)
	return f
}

func (f *outflow) grant(chunks int64) {
	f.mu.Lock()
	if chunks > 0 {
		f.credits += chunks
	}
	f.mu.Unlock()
	f.ready.Broadcast()
}

// spend takes one credit, waiting (and looking at the budget every 100 ms)
// while the daemon has none to give.
func (f *outflow) spend(b *budget) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	for f.credits <= 0 {
		if err := b.check("waiting for the daemon to take the archive's chunks"); err != nil {
			return err
		}
		wake := time.AfterFunc(100*time.Millisecond, f.ready.Broadcast)
		f.ready.Wait()
		wake.Stop()
	}
	f.credits--
	return nil
}

// chunkWriter hands out chunkBytes pieces as they fill, within a cap.
type chunkWriter struct {
	buf   []byte
	emit  func([]byte) error
	total int64
	cap   int64
}

func (w *chunkWriter) Write(data []byte) (int, error) {
	w.total += int64(len(data))
	if w.total > w.cap {
		return 0, failWith(protocol.LimitExceeded, "the archive exceeds %d bytes", w.cap)
	}
	w.buf = append(w.buf, data...)
	for len(w.buf) >= chunkBytes {
		if err := w.emit(w.buf[:chunkBytes]); err != nil {
			return 0, err
		}
		w.buf = append(w.buf[:0:0], w.buf[chunkBytes:]...)
	}
	return len(data), nil
}

func (w *chunkWriter) flush() error {
	if len(w.buf) == 0 {
		return nil
	}
	err := w.emit(w.buf)
	w.buf = nil
	return err
}

type packer struct {
	tar      *tar.Writer
	redactor *Redactor
	budget   *budget
	count    int64
}

// pack tars the (resolved) paths into `out`.
func pack(request *protocol.Archive, out *chunkWriter, redactor *Redactor, b *budget) (*protocol.Transferred, error) {
	p := &packer{tar: tar.NewWriter(out), redactor: redactor, budget: b}
	for _, path := range request.Paths {
		if err := p.tree(path); err != nil {
			return nil, err
		}
	}
	if err := p.tar.Close(); err != nil {
		return nil, err
	}
	if err := out.flush(); err != nil {
		return nil, err
	}
	reply := protocol.NewTransferred()
	reply.Files, reply.Bytes = p.count, out.total
	return &reply, nil
}

func (p *packer) tree(top string) error {
	parent, name, err := openParent(top, false)
	if err != nil {
		return err
	}
	arcname := path.Base(strings.TrimRight(top, "/"))
	if arcname == "/" || arcname == "" {
		arcname = "."
	}
	st, isDir, err := p.add(parent, name, arcname, top)
	if err != nil || !isDir {
		syscall.Close(parent)
		return err
	}
	dir, err := syscall.Openat(parent, name, openDirFlags, 0)
	syscall.Close(parent)
	if err != nil {
		return osFailure(err, top)
	}
	defer syscall.Close(dir)
	if err := sameFile(dir, st, top); err != nil {
		return err
	}
	return p.below(dir, arcname, top)
}

const (
	openDirFlags  = syscall.O_RDONLY | syscall.O_DIRECTORY | syscall.O_NOFOLLOW | syscall.O_CLOEXEC
	openFileFlags = syscall.O_RDONLY | syscall.O_NOFOLLOW | syscall.O_NONBLOCK | syscall.O_CLOEXEC
)

func sameFile(fd int, st *syscall.Stat_t, path string) error {
	var now syscall.Stat_t
	if err := syscall.Fstat(fd, &now); err != nil {
		return osFailure(err, path)
	}
	if now.Dev != st.Dev || now.Ino != st.Ino || now.Mode&syscall.S_IFMT != st.Mode&syscall.S_IFMT {
		return failWith(protocol.PathDenied, "%s: replaced while it was being archived", path)
	}
	return nil
}

// below adds a directory's entries, sorted, then each subdirectory's in
// turn (os.fwalk's order, top down).
func (p *packer) below(dir int, arcname, path string) error {
	names, err := readNames(dir)
	if err != nil {
		return osFailure(err, path)
	}
	sort.Strings(names)
	type sub struct {
		name string
		st   *syscall.Stat_t
	}
	var dirs []sub
	for _, name := range names {
		st, isDir, err := p.add(dir, name, arcname+"/"+name, path+"/"+name)
		if err != nil {
			return err
		}
		if isDir {
			dirs = append(dirs, sub{name, st})
		}
	}
	for _, d := range dirs {
		fd, err := syscall.Openat(dir, d.name, openDirFlags, 0)
		if err != nil {
			return osFailure(err, path+"/"+d.name)
		}
		err = sameFile(fd, d.st, path+"/"+d.name)
		if err == nil {
			err = p.below(fd, arcname+"/"+d.name, path+"/"+d.name)
		}
		syscall.Close(fd)
		if err != nil {
			return err
		}
	}
	return nil
}

// readNames are the names in a directory (its descriptor is read from the start).
func readNames(dir int) ([]string, error) {
	fd, err := syscall.Openat(dir, ".", openDirFlags, 0)
	if err != nil {
		return nil, err
	}
	defer syscall.Close(fd)
	var names []string
	buf := make([]byte, 8192)
	for {
		n, err := syscall.ReadDirent(fd, buf)
		if err != nil {
			return nil, err
		}
		if n <= 0 {
			return names, nil
		}
		_, _, names = syscall.ParseDirent(buf[:n], -1, names)
	}
}

// add adds entry `name` of `dir`; its stat, and whether it is a directory to descend.
func (p *packer) add(dir int, name, arcname, path string) (*syscall.Stat_t, bool, error) {
	if err := p.budget.check("packing the archive"); err != nil {
		return nil, false, err
	}
	var st syscall.Stat_t
	if err := lstatAt(dir, name, &st); err != nil {
		return nil, false, osFailure(err, path)
	}
	header := &tar.Header{Name: arcname, Mode: int64(st.Mode & 0o7777), Uid: int(st.Uid),
		Gid: int(st.Gid), ModTime: time.Unix(st.Mtim.Sec, 0), Format: tar.FormatPAX}
	switch st.Mode & syscall.S_IFMT {
	case syscall.S_IFDIR:
		header.Typeflag, header.Name = tar.TypeDir, arcname+"/"
		return &st, true, p.write(header, nil)
	case syscall.S_IFLNK:
		target, err := readlinkAt(dir, name)
		if err != nil {
			return nil, false, osFailure(err, path)
		}
		header.Typeflag, header.Linkname = tar.TypeSymlink, target
		return nil, false, p.write(header, nil)
	case syscall.S_IFREG:
		return nil, false, p.file(dir, name, header, &st, path)
	}
	return nil, false, nil // sockets, FIFOs and devices are left out
}

func readlinkAt(dir int, name string) (string, error) {
	at, err := syscall.BytePtrFromString(name)
	if err != nil {
		return "", err
	}
	for size := 4096; ; size *= 2 {
		buf := make([]byte, size)
		n, _, errno := syscall.Syscall6(syscall.SYS_READLINKAT, uintptr(dir),
			uintptr(unsafe.Pointer(at)), uintptr(unsafe.Pointer(&buf[0])), uintptr(size), 0, 0)
		if errno != 0 {
			return "", errno
		}
		if int(n) < size {
			return string(buf[:n]), nil
		}
	}
}

func (p *packer) file(dir int, name string, header *tar.Header, st *syscall.Stat_t, path string) error {
	fd, err := syscall.Openat(dir, name, openFileFlags, 0)
	if err != nil {
		return osFailure(err, path)
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	if err := sameFile(fd, st, path); err != nil {
		return err
	}
	var now syscall.Stat_t
	_ = syscall.Fstat(fd, &now)
	header.Typeflag, header.Size = tar.TypeReg, now.Size
	if p.redactor.empty() {
		return p.write(header, f)
	}
	data, err := io.ReadAll(io.LimitReader(f, redactMaxBytes+1))
	if err != nil {
		return osFailure(err, path)
	}
	if len(data) <= redactMaxBytes {
		if utf8.Valid(data) {
			data = p.redactor.redact(data, false, false)
		}
		header.Size = int64(len(data))
		return p.write(header, strings.NewReader(string(data)))
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return osFailure(err, path)
	}
	holds, err := p.holdsSecretAsText(f)
	if err != nil {
		return err
	}
	if holds {
		return failWith(protocol.LimitExceeded, "%s: a text file over %d bytes that holds a secret "+
			"of the session; it is too large to redact in a download", path, redactMaxBytes)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return osFailure(err, path)
	}
	return p.write(header, f)
}

// holdsSecretAsText: whether a file read to its end is valid UTF-8 and holds a secret.
func (p *packer) holdsSecretAsText(f io.Reader) (bool, error) {
	var carry, tail []byte
	found := false
	buf := make([]byte, chunkBytes)
	for {
		if err := p.budget.check("packing the archive"); err != nil {
			return false, err
		}
		n, err := f.Read(buf)
		data := buf[:n]
		if n > 0 {
			whole := append(carry, data...)
			cut := len(whole) - partialUTF8Tail(whole)
			if !utf8.Valid(whole[:cut]) {
				return false, nil
			}
			carry = append([]byte(nil), whole[cut:]...)
			seen := append(tail, data...)
			found = found || p.redactor.found(seen)
			tail = append([]byte(nil), seen[max(0, len(seen)-p.redactor.longest):]...)
		}
		if err == io.EOF || (err == nil && n == 0) {
			return found && len(carry) == 0, nil
		}
		if err != nil {
			return false, err
		}
	}
}

// write adds one entry: its header, and `data` (exactly its size) for a file.
func (p *packer) write(header *tar.Header, data io.Reader) error {
	if err := p.tar.WriteHeader(header); err != nil {
		return err
	}
	if data != nil {
		if _, err := io.CopyN(p.tar, checked{data, p.budget}, header.Size); err != nil {
			if _, ok := err.(*opError); ok {
				return err
			}
			return failWith(protocol.Internal, "%s: changed while it was being archived: %v", header.Name, err)
		}
	}
	p.count++
	return nil
}

// checked reads stop when the operation's budget is spent.
type checked struct {
	r io.Reader
	b *budget
}

func (c checked) Read(buf []byte) (int, error) {
	if err := c.b.check("packing the archive"); err != nil {
		return 0, err
	}
	return c.r.Read(buf)
}

// transfer is an Archive or Extract in flight: its budget (Cancel) and its
// credits (an Archive's) or chunks (an Extract's).
type transfer struct {
	budget *budget
	flow   *outflow
	in     *inflow
}

func init() {
	handle("archive", func(a *Agent, frame *protocol.Frame, m protocol.Message) {
		request := m.(*protocol.Archive)
		t := &transfer{budget: newBudget(request.DeadlineS), flow: newOutflow(request.Window)}
		redactor := noSecrets
		if request.Redact {
			redactor = a.redactor.get()
		}
		emit := func(chunk []byte) error {
			if err := t.flow.spend(t.budget); err != nil {
				return err
			}
			event := protocol.NewArchiveChunk()
			a.send(&event, frame.ID, chunk)
			return nil
		}
		a.runTransfer(frame.ID, request, t, func() (*protocol.Transferred, error) {
			return pack(request, &chunkWriter{cap: request.MaxBytes, emit: emit}, redactor, t.budget)
		})
	})
	handle("credit", func(a *Agent, frame *protocol.Frame, m protocol.Message) {
		chunks := m.(*protocol.Credit).Chunks
		if t := a.transferOf(frame.ID); t != nil && t.flow != nil {
			t.flow.grant(chunks)
		} else if p := a.programOf(frame.ID); p != nil {
			p.grant(chunks)
		}
	})
}

// cancelTransfer stops the transfer of request `id`, if one runs.
func (a *Agent) cancelTransfer(id int64) {
	t := a.transferOf(id)
	if t == nil {
		return
	}
	t.budget.cancelled.Store(true)
	if t.flow != nil {
		t.flow.ready.Broadcast()
	}
	if t.in != nil {
		t.in.ready.Broadcast()
	}
}

func (a *Agent) transferOf(id int64) *transfer {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.transfers[id]
}

// runTransfer runs fn as the user the request names (asRequester) on a
// goroutine of its own, the transfer known by request id meanwhile, and
// answers the request.
func (a *Agent) runTransfer(id int64, request protocol.Message, t *transfer, fn func() (*protocol.Transferred, error)) {
	a.mu.Lock()
	a.transfers[id] = t
	a.mu.Unlock()
	go func() {
		defer func() {
			a.mu.Lock()
			delete(a.transfers, id)
			a.mu.Unlock()
		}()
		var reply *protocol.Transferred
		err := asRequester(request, func() (err error) {
			reply, err = fn()
			return err
		})
		if err != nil {
			a.send(failureOf(err), id, nil)
			return
		}
		a.send(reply, id, nil)
	}()
}
