package main

// Listing a directory (files.list_dir) and the background-process requests,
// which have nothing to name while this agent runs no background process.

import (
	"os"
	"path"
	"sort"
	"syscall"

	"toolrt/agent/protocol"
)

func init() {
	handle("list", fileOp(func(m protocol.Message, _ []byte) (protocol.Message, []byte, error) {
		return listDir(m.(*protocol.ListDir))
	}))
	handle("process_list", func(a *Agent, frame *protocol.Frame, _ protocol.Message) {
		reply := protocol.NewProcessListReply()
		a.send(&reply, frame.ID, nil)
	})
	noProcess := func(a *Agent, frame *protocol.Frame, m protocol.Message) {
		var id string
		switch request := m.(type) {
		case *protocol.ProcessOutput:
			id = request.ProcessID
		case *protocol.ProcessKill:
			id = request.ProcessID
		}
		a.fail(frame.ID, protocol.NotFound,
			"no background process "+pyQuote(clip(id, 40))+" (known handles: none)")
	}
	handle("process_output", noProcess)
	handle("process_kill", noProcess)
}

func pyQuote(s string) string { return "'" + s + "'" }

// listDir lists the entries below a directory, symlinks listed but never
// followed: a directory's entries sorted, then each subdirectory's in turn
// (os.fwalk's order), at most max_entries of them.
func listDir(request *protocol.ListDir) (protocol.Message, []byte, error) {
	top := request.Path
	for len(top) > 1 && top[len(top)-1] == '/' {
		top = top[:len(top)-1]
	}
	dir, err := openDir(top, false)
	if err != nil {
		return nil, nil, err
	}
	readable, err := syscall.Openat(dir, ".", syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
	syscall.Close(dir)
	if err != nil {
		return nil, nil, osFailure(err, top)
	}
	reply := protocol.NewListing()
	w := &walker{reply: &reply, cap: int(request.MaxEntries), recursive: request.Recursive}
	w.walk(readable, top)
	return &reply, nil, nil
}

type walker struct {
	reply     *protocol.Listing
	cap       int
	recursive bool
}

// walk lists directory `fd` (which it closes), known as `base`.
func (w *walker) walk(fd int, base string) {
	f := os.NewFile(uintptr(fd), base)
	names, err := f.Readdirnames(-1)
	if err != nil {
		f.Close()
		return
	}
	sort.Strings(names)
	var dirs []string
	for _, name := range names {
		if len(w.reply.Entries) >= w.cap {
			w.reply.Truncated = true
			break
		}
		var st syscall.Stat_t
		if lstatAt(fd, name, &st) != nil {
			continue
		}
		entry := protocol.NewDirEntry()
		entry.Path, entry.Type = path.Join(base, name), kindOf(st.Mode)
		if entry.Type == "file" {
			entry.Size = st.Size
		} else if entry.Type == "dir" {
			dirs = append(dirs, name)
		}
		w.reply.Entries = append(w.reply.Entries, entry)
	}
	for _, name := range dirs {
		if w.reply.Truncated || !w.recursive {
			break
		}
		child, err := syscall.Openat(fd, name, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
		if err == nil {
			w.walk(child, path.Join(base, name))
		}
	}
	f.Close()
}
