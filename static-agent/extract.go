package main

// Tar archives into the sandbox (uploads, restores) as the sandbox
// user. The archive is read in one pass as it
// arrives (the daemon's chunks, a Credit for each one taken), decompressed
// on the way when it is gzip, bzip2 or xz: every member is checked as its
// header comes (no absolute paths, no `..`, no devices, FIFOs or setuid
// bits, symlinks and hard links only inside the archive's root, its size
// within the free space) and written into a staging directory in the
// destination's filesystem without following any link. Once the archive
// has ended every link it made is resolved for real, and only then are
// the entries renamed into place: a refusal at any point changes nothing.
// A restore keeps symlinks wherever they point and removes the
// destination's old contents after staging, before the moves.

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/bzip2"
	"compress/gzip"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"github.com/ulikunitz/xz"

	"toolrt/agent/protocol"
)

// Entries of one archive: each costs the agent a little memory.
const maxMembers = 500_000

// inflow is an Extract's archive as it arrives: the daemon's chunks, read
// as a stream; each chunk taken grants the daemon a Credit.
type inflow struct {
	mu      sync.Mutex
	ready   *sync.Cond
	window  int
	chunks  [][]byte
	ended   bool
	overrun bool
	current []byte
	credit  func()
	budget  *budget
}

func newInflow(window int64, credit func(), b *budget) *inflow {
	f := &inflow{window: max(1, int(min64(window, 1<<20))), credit: credit, budget: b}
	f.ready = sync.NewCond(&f.mu)
	return f
}

// put is the dispatcher's side: a chunk of the archive, `end` on the last.
func (f *inflow) put(data []byte, end bool) {
	f.mu.Lock()
	if len(data) > 0 {
		f.chunks = append(f.chunks, data)
		// The daemon may have `window` chunks on their way, no more.
		f.overrun = f.overrun || len(f.chunks) > f.window
	}
	f.ended = f.ended || end
	f.mu.Unlock()
	f.ready.Broadcast()
}

func (f *inflow) Read(buf []byte) (int, error) {
	if len(f.current) == 0 {
		if err := f.next(); err != nil {
			return 0, err
		}
	}
	n := copy(buf, f.current)
	f.current = f.current[n:]
	return n, nil
}

func (f *inflow) next() error {
	f.mu.Lock()
	for len(f.chunks) == 0 {
		if f.ended {
			f.mu.Unlock()
			return io.EOF
		}
		if err := f.budget.check("waiting for the archive's next chunk"); err != nil {
			f.mu.Unlock()
			return err
		}
		wake := time.AfterFunc(100*time.Millisecond, f.ready.Broadcast)
		f.ready.Wait()
		wake.Stop()
	}
	if f.overrun {
		f.mu.Unlock()
		return failWith(protocol.InvalidArguments,
			"the daemon sent more than the %d chunks it had credit for", f.window)
	}
	f.current, f.chunks = f.chunks[0], f.chunks[1:]
	f.mu.Unlock()
	f.credit()
	return nil
}

// staged is what is left of a member once written.
type staged struct {
	clean string // its path below the root, normalized ("" for the root)
	kind  string // "dir", "symlink" or "file"
	name  string // as the archive spelled it
}

func cleanPath(p string) string {
	var parts []string
	for _, part := range strings.Split(p, "/") {
		if part != "" && part != "." {
			parts = append(parts, part)
		}
	}
	return strings.Join(parts, "/")
}

func memberError(name, why string) error {
	return failWith(protocol.InvalidArguments, "archive member %s: %s", pyQuote(name), why)
}

func isFile(h *tar.Header) bool {
	return h.Typeflag == tar.TypeReg || h.Typeflag == tar.TypeRegA || h.Typeflag == tar.TypeCont ||
		h.Typeflag == tar.TypeGNUSparse
}

func checkMember(h *tar.Header, files map[string]int64, keepLinks bool) (string, error) {
	name := h.Name
	if strings.HasPrefix(name, "/") || strings.ContainsRune(name, 0) {
		return "", memberError(name, "absolute path")
	}
	clean := cleanPath(name)
	for _, part := range strings.Split(clean, "/") {
		if part == ".." {
			return "", memberError(name, "'..' in the path")
		}
	}
	if !(isFile(h) || h.Typeflag == tar.TypeDir || h.Typeflag == tar.TypeSymlink || h.Typeflag == tar.TypeLink) {
		return "", memberError(name, "device or special file")
	}
	if h.Mode&(syscall.S_ISUID|syscall.S_ISGID) != 0 {
		return "", memberError(name, "setuid/setgid bit")
	}
	if h.Typeflag == tar.TypeSymlink && !keepLinks {
		target := h.Linkname
		if strings.HasPrefix(target, "/") || strings.ContainsRune(target, 0) {
			return "", memberError(name, "link to an absolute path")
		}
		depth := len(strings.Split(clean, "/")) - 1
		if clean == "" {
			depth = -1
		}
		for _, part := range strings.Split(target, "/") {
			switch part {
			case "..":
				depth--
			case "", ".":
			default:
				depth++
			}
			if depth < 0 {
				return "", memberError(name, "link points outside the root")
			}
		}
	}
	if h.Typeflag == tar.TypeLink {
		if _, ok := files[cleanPath(h.Linkname)]; !ok {
			return "", memberError(name, "hard link to something not earlier in the archive")
		}
	}
	return clean, nil
}

// decompressed is the archive's bytes as they are read, gunzipped or
// bunzipped or unxzed when its first bytes say so.
func decompressed(source io.Reader) (io.Reader, error) {
	buffered := bufio.NewReaderSize(source, 64<<10)
	head, _ := buffered.Peek(6)
	switch {
	case bytes.HasPrefix(head, []byte{0x1f, 0x8b}):
		return gzip.NewReader(buffered)
	case bytes.HasPrefix(head, []byte("BZh")):
		return bzip2.NewReader(buffered), nil
	case bytes.HasPrefix(head, []byte("\xfd7zXZ\x00")):
		return xz.NewReader(buffered)
	}
	return buffered, nil
}

// stage reads the archive into `staging`; what was staged and the bytes its files hold.
func stage(source io.Reader, staging, dest string, keepLinks bool, b *budget) ([]staged, int64, error) {
	var done []staged
	files := map[string]int64{}
	var total int64
	room, known := freeSpace(dest)
	unreadable := func(err error) error {
		var failure *opError
		if errors.As(err, &failure) {
			return err
		}
		return failWith(protocol.InvalidArguments, "not a readable tar archive: %v", err)
	}
	stream, err := decompressed(source)
	if err != nil {
		return nil, 0, unreadable(err)
	}
	reader := tar.NewReader(stream)
	for {
		h, err := reader.Next()
		if err == io.EOF {
			return done, total, nil
		}
		if err != nil {
			return nil, 0, unreadable(err)
		}
		if err := b.check("reading the archive"); err != nil {
			return nil, 0, err
		}
		if len(done) >= maxMembers {
			return nil, 0, failWith(protocol.LimitExceeded, "the archive has more than %d entries", maxMembers)
		}
		clean, err := checkMember(h, files, keepLinks)
		if err != nil {
			return nil, 0, err
		}
		var size int64
		if isFile(h) {
			size = h.Size
		}
		if h.Typeflag == tar.TypeLink {
			size = files[cleanPath(h.Linkname)]
		}
		total += size
		if known && total > room {
			return nil, 0, failWith(protocol.LimitExceeded, "the archive holds more than the %d bytes free in %s", room, dest)
		}
		if clean != "" {
			if err := stageMember(reader, h, clean, staging, b); err != nil {
				return nil, 0, unreadable(err)
			}
		}
		kind := "file"
		switch h.Typeflag {
		case tar.TypeDir:
			kind = "dir"
		case tar.TypeSymlink:
			kind = "symlink"
		}
		if kind == "file" {
			files[clean] = size
		} else {
			delete(files, clean)
		}
		done = append(done, staged{clean, kind, h.Name})
	}
}

const createFlags = syscall.O_WRONLY | syscall.O_CREAT | syscall.O_EXCL | syscall.O_NOFOLLOW | syscall.O_CLOEXEC

// stageMember writes one member below `root` without following links; a
// hard link becomes a copy of the staged file it names.
func stageMember(reader io.Reader, h *tar.Header, clean, root string, b *budget) error {
	parent, name, err := openParent(root+"/"+clean, true)
	if err != nil {
		return err
	}
	defer syscall.Close(parent)
	if h.Typeflag == tar.TypeDir {
		if err := syscall.Mkdirat(parent, name, 0o755); err != nil && err != syscall.EEXIST {
			return osFailure(err, root+"/"+clean)
		}
		return nil
	}
	// A name given again replaces what the archive put there before.
	var st syscall.Stat_t
	if lstatAt(parent, name, &st) == nil {
		if st.Mode&syscall.S_IFMT == syscall.S_IFDIR {
			removeTree(parent, name)
		} else {
			_ = syscall.Unlinkat(parent, name)
		}
	}
	if h.Typeflag == tar.TypeSymlink {
		if err := symlinkAt(h.Linkname, parent, name); err != nil {
			return osFailure(err, root+"/"+clean)
		}
		return nil
	}
	data := reader
	mode := uint32(h.Mode)&0o777 | 0o600
	if h.Typeflag == tar.TypeLink {
		source, err := openFile(root+"/"+cleanPath(h.Linkname), syscall.O_RDONLY)
		if err != nil {
			return err
		}
		f := os.NewFile(uintptr(source), h.Linkname)
		defer f.Close()
		var sst syscall.Stat_t
		_ = syscall.Fstat(source, &sst)
		data, mode = f, sst.Mode&0o7777
	}
	fd, err := syscall.Openat(parent, name, createFlags, mode)
	if err != nil {
		return osFailure(err, root+"/"+clean)
	}
	out := os.NewFile(uintptr(fd), name)
	defer out.Close()
	if _, err := io.Copy(out, checkedUnpack{data, b}); err != nil {
		return err
	}
	return nil
}

type checkedUnpack struct {
	r io.Reader
	b *budget
}

func (c checkedUnpack) Read(buf []byte) (int, error) {
	if err := c.b.check("unpacking the archive"); err != nil {
		return 0, err
	}
	return c.r.Read(buf)
}

func min64(a, b int64) int64 {
	if a < b {
		return a
	}
	return b
}

// symlinkAt and unlinkDirAt: calls Go's syscall package lacks.
func symlinkAt(target string, dir int, name string) error {
	from, err := syscall.BytePtrFromString(target)
	if err != nil {
		return err
	}
	at, err := syscall.BytePtrFromString(name)
	if err != nil {
		return err
	}
	_, _, errno := syscall.Syscall(syscall.SYS_SYMLINKAT, uintptr(unsafe.Pointer(from)), uintptr(dir),
		uintptr(unsafe.Pointer(at)))
	if errno != 0 {
		return errno
	}
	return nil
}

// removeTree removes `name` below `dir` and all it holds, never following a link.
func removeTree(dir int, name string) {
	var st syscall.Stat_t
	if lstatAt(dir, name, &st) != nil {
		return
	}
	if st.Mode&syscall.S_IFMT != syscall.S_IFDIR {
		_ = syscall.Unlinkat(dir, name)
		return
	}
	fd, err := syscall.Openat(dir, name, openDirFlags, 0)
	if err != nil {
		return
	}
	names, _ := readNames(fd)
	for _, child := range names {
		removeTree(fd, child)
	}
	syscall.Close(fd)
	_ = unlinkDirAt(dir, name)
}

func unlinkDirAt(dir int, name string) error {
	const atRemoveDir = 0x200
	at, err := syscall.BytePtrFromString(name)
	if err != nil {
		return err
	}
	_, _, errno := syscall.Syscall(syscall.SYS_UNLINKAT, uintptr(dir), uintptr(unsafe.Pointer(at)), atRemoveDir)
	if errno != 0 {
		return errno
	}
	return nil
}

// linksStayInside resolves every extracted symlink for real, among the
// archive's own entries and then in the destination as it is: neither may leave.
func linksStayInside(staging, dest string, entries []staged) error {
	for _, entry := range entries {
		if entry.kind != "symlink" {
			continue
		}
		real := realpath(staging + "/" + entry.clean)
		inside, ok := within(real, staging)
		if ok {
			if inside == "" {
				real = realpath(dest)
			} else {
				real = realpath(dest + "/" + inside)
			}
			_, ok = within(real, dest)
		}
		if !ok {
			return memberError(entry.name, fmt.Sprintf("link points outside the root (%s)", real))
		}
	}
	return nil
}

func within(path, root string) (string, bool) {
	if path == root {
		return "", true
	}
	if root == "/" {
		return path[1:], true
	}
	if strings.HasPrefix(path, root+"/") {
		return path[len(root)+1:], true
	}
	return "", false
}

func moveIntoPlace(staging, dest string, entries []staged) error {
	// A name may occur more than once in an archive: the last one wins,
	// in the place of its first.
	last := map[string]staged{}
	var order []string
	for _, entry := range entries {
		if _, seen := last[entry.clean]; !seen {
			order = append(order, entry.clean)
		}
		last[entry.clean] = entry
	}
	// Type conflicts are found before anything moves.
	wanted := map[string]bool{}
	var wantedOrder []string
	want := func(clean string, isDir bool) {
		if _, seen := wanted[clean]; !seen {
			wantedOrder = append(wantedOrder, clean)
		}
		wanted[clean] = isDir
	}
	for _, clean := range order {
		if clean == "" {
			continue
		}
		parts := strings.Split(clean, "/")
		for i := 1; i < len(parts); i++ {
			want(strings.Join(parts[:i], "/"), true)
		}
		want(clean, last[clean].kind == "dir")
	}
	for _, clean := range wantedOrder {
		target := joinPath(dest, clean)
		var st syscall.Stat_t
		if syscall.Lstat(target, &st) != nil {
			continue
		}
		if isDir := st.Mode&syscall.S_IFMT == syscall.S_IFDIR; isDir != wanted[clean] {
			what := "file"
			if wanted[clean] {
				what = "directory"
			}
			return failWith(protocol.InvalidArguments, "%s exists as a %s; the archive has a %s there",
				target, kindWord(st.Mode), what)
		}
	}
	for _, clean := range order {
		entry := last[clean]
		if clean == "" || entry.kind == "dir" {
			if clean != "" {
				fd, err := openDir(joinPath(dest, clean), true)
				if err != nil {
					return err
				}
				syscall.Close(fd)
			}
			continue
		}
		srcParent, name, err := openParent(staging+"/"+clean, false)
		if err != nil {
			return err
		}
		dstParent, _, err := openParent(joinPath(dest, clean), true)
		if err != nil {
			syscall.Close(srcParent)
			return err
		}
		err = syscall.Renameat(srcParent, name, dstParent, name)
		syscall.Close(srcParent)
		syscall.Close(dstParent)
		if err != nil {
			return osFailure(err, joinPath(dest, clean))
		}
	}
	return nil
}

// kindWord is how files._kind names a file's type in messages.
func kindWord(mode uint32) string {
	return map[string]string{"dir": "directory", "symlink": "symlink", "file": "file",
		"other": "special file"}[kindOf(mode)]
}

// firstMissing is the shortest prefix of path that does not exist ("" when all do).
func firstMissing(path string) string {
	prefix := ""
	for _, part := range strings.Split(strings.Trim(path, "/"), "/") {
		if part == "" {
			continue
		}
		prefix += "/" + part
		var st syscall.Stat_t
		if syscall.Lstat(prefix, &st) != nil {
			return prefix
		}
	}
	return ""
}

// freeSpace is the free space of the filesystem `path` is (or will be) on
// (a variable: the fuzz test gives each run a small disk).
var freeSpace = freeBytes

func freeBytes(path string) (int64, bool) {
	for path != "" {
		var fs syscall.Statfs_t
		if syscall.Statfs(path, &fs) == nil {
			return int64(fs.Bavail) * fs.Frsize, true
		}
		path = path[:max(0, strings.LastIndexByte(path, '/'))]
	}
	return 0, false
}

func unpack(source io.Reader, dest string, restore bool, b *budget) ([]staged, int64, error) {
	// Staged in the destination's filesystem so that the renames are atomic.
	random := make([]byte, 16)
	_, _ = rand.Read(random)
	stagingName := ".toolrt-extract-" + hex.EncodeToString(random)
	staging := joinPath(dest, stagingName)
	parent, err := openDir(dest, false)
	if err != nil {
		return nil, 0, err
	}
	defer syscall.Close(parent)
	if err := syscall.Mkdirat(parent, stagingName, 0o700); err != nil {
		return nil, 0, osFailure(err, staging)
	}
	listing, err := syscall.Openat(parent, ".", openDirFlags, 0)
	if err != nil {
		return nil, 0, osFailure(err, dest)
	}
	defer syscall.Close(listing)
	defer removeTree(listing, stagingName)
	entries, total, err := stage(source, staging, dest, restore, b)
	if err != nil {
		return nil, 0, err
	}
	if restore {
		// Everything is staged and checked: only now does the old go.
		names, err := readNames(listing)
		if err != nil {
			return nil, 0, osFailure(err, dest)
		}
		for _, name := range names {
			if name != stagingName {
				removeTree(listing, name)
			}
		}
	} else if err := linksStayInside(staging, dest, entries); err != nil {
		return nil, 0, err
	}
	return entries, total, moveIntoPlace(staging, dest, entries)
}

// extract unpacks the tar archive read from source below request.Dest:
// every member checked, all or nothing.
func extract(request *protocol.Extract, source io.Reader, b *budget) (*protocol.Transferred, error) {
	dest := strings.TrimRight(request.Dest, "/")
	if dest == "" {
		dest = "/"
	}
	created := firstMissing(dest)
	fd, err := openDir(dest, true)
	if err != nil {
		return nil, err
	}
	syscall.Close(fd)
	entries, total, err := unpack(source, dest, request.Restore, b)
	if err != nil {
		// All or nothing: directories made for the destination go too.
		if created != "" {
			if parent, name, perr := openParent(created, false); perr == nil {
				if listing, lerr := syscall.Openat(parent, ".", openDirFlags, 0); lerr == nil {
					removeTree(listing, name)
					syscall.Close(listing)
				}
				syscall.Close(parent)
			}
		}
		return nil, err
	}
	reply := protocol.NewTransferred()
	for _, entry := range entries {
		if entry.kind != "dir" {
			reply.Files++
		}
	}
	reply.Bytes = total
	return &reply, nil
}

func init() {
	handle("extract", func(a *Agent, frame *protocol.Frame, m protocol.Message) {
		request := m.(*protocol.Extract)
		b := newBudget(request.DeadlineS)
		credit := func() {
			c := protocol.NewCredit()
			c.Chunks = 1
			a.send(&c, frame.ID, nil)
		}
		t := &transfer{budget: b, in: newInflow(request.Window, credit, b)}
		a.runTransfer(frame.ID, request, t, func() (*protocol.Transferred, error) {
			return extract(request, t.in, b)
		})
	})
	// A chunk of an Extract's archive; none is answered (the Extract is).
	handle("data", func(a *Agent, frame *protocol.Frame, m protocol.Message) {
		if t := a.transferOf(frame.ID); t != nil && t.in != nil {
			t.in.put(frame.Body, m.(*protocol.ArchiveChunk).End)
		}
	})
}
