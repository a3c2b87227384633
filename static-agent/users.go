package main

// Who a program or a file operation runs as, and what root may do there.
// `user` names a user of the sandbox's
// /etc/passwd, by name or uid (a bare uid it lacks runs with the same
// gid); "" is the sandbox user. The daemon has already checked that the
// session may use it.
//
// Root has no capabilities unless the request says its session grants
// them (`capabilities`), and then exactly rootCapabilities: the launcher
// sets a program's permitted set before its exec (its UID argument
// `0:MASK`); a file operation as root lowers the effective set of its own
// thread only, and raises it back afterwards (asUser).

import (
	"bufio"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"unsafe"

	"toolrt/agent/protocol"
)

// rootCapabilities: CHOWN, DAC_OVERRIDE, FOWNER, FSETID, SETGID, SETUID
// (bits 0, 1, 3, 4, 6, 7), enough for adduser and for owning files,
// nothing reaching past the sandbox.
const rootCapabilities = 1<<0 | 1<<1 | 1<<3 | 1<<4 | 1<<6 | 1<<7

const (
	lastUID           = 1<<31 - 1
	capabilityVersion = 0x20080522 // _LINUX_CAPABILITY_VERSION_3: two 32-bit words per set
)

// passwdPath is the sandbox's user table (a variable for the tests).
var passwdPath = "/etc/passwd"

// who is a uid, a gid and (root only) the capabilities it runs with.
type who struct {
	uid, gid     int
	capabilities uint32
}

var sandboxUser = who{uid: protocol.SandboxUid, gid: protocol.SandboxGid}

// launcherUID is the launcher's UID argument: the uid, or `0:MASK` for
// root (the capabilities it keeps, in hex).
func (w who) launcherUID() string {
	if w.uid == 0 {
		return "0:" + strconv.FormatUint(uint64(w.capabilities), 16)
	}
	return strconv.Itoa(w.uid)
}

// resolveUser is the uid, gid and (for root) capabilities `user` runs
// with; USER_NOT_ALLOWED when the sandbox's /etc/passwd has no such name
// (or a uid past the last one).
func resolveUser(user string, capabilities bool) (who, error) {
	if user == "" {
		return sandboxUser, nil
	}
	uid, err := strconv.ParseUint(user, 10, 64)
	numeric := isDigits(user) && err == nil
	entry, found := lookupPasswd(passwdPath, user, numeric, uid)
	if !found {
		if !numeric || uid > lastUID {
			return who{}, failWith(protocol.UserNotAllowed,
				"user %s: no such user in the sandbox's /etc/passwd", pyQuote(firstChars(user, 64)))
		}
		entry = who{uid: int(uid), gid: int(uid)}
	}
	if entry.uid == 0 && capabilities {
		entry.capabilities = rootCapabilities
	}
	return entry, nil
}

// lookupPasswd finds the first entry of the passwd file at path whose name
// is name (or, when byUID, whose uid is uid). Parsed here: the agent has no
// libc.
func lookupPasswd(path, name string, byUID bool, uid uint64) (who, bool) {
	f, err := os.Open(path)
	if err != nil {
		return who{}, false
	}
	defer f.Close()
	lines := bufio.NewScanner(f)
	lines.Buffer(make([]byte, 4096), 1<<20)
	for lines.Scan() {
		// name:password:uid:gid:gecos:home:shell
		fields := strings.Split(lines.Text(), ":")
		if len(fields) < 4 {
			continue
		}
		entryUID, errU := strconv.ParseUint(fields[2], 10, 32)
		entryGID, errG := strconv.ParseUint(fields[3], 10, 32)
		if errU != nil || errG != nil {
			continue
		}
		if (byUID && entryUID == uid) || (!byUID && fields[0] == name) {
			return who{uid: int(entryUID), gid: int(entryGID)}, true
		}
	}
	return who{}, false
}

func isDigits(s string) bool {
	for _, c := range []byte(s) {
		if c < '0' || c > '9' {
			return false
		}
	}
	return s != ""
}

// firstChars is s cut to its first n characters (Python's s[:n]).
func firstChars(s string, n int) string {
	runes := []rune(s)
	if len(runes) <= n {
		return s
	}
	return string(runes[:n])
}

// capabilitySets is the kernel's __user_cap_data_struct, twice (the low
// and the high 32 capabilities).
type capabilitySets [2]struct{ effective, permitted, inheritable uint32 }

type capabilityHeader struct {
	version uint32
	pid     int32
}

// threadCapabilities reads (set=false) or sets the calling thread's
// capability sets. Raw: capset applies to the calling thread only, which
// is what the caller (on a locked OS thread) wants.
func threadCapabilities(sets *capabilitySets, set bool) syscall.Errno {
	header := capabilityHeader{version: capabilityVersion}
	call := uintptr(syscall.SYS_CAPGET)
	if set {
		call = syscall.SYS_CAPSET
	}
	_, _, errno := syscall.RawSyscall(call, uintptr(unsafe.Pointer(&header)), uintptr(unsafe.Pointer(sets)), 0)
	return errno
}

// asUser runs fn with the calling goroutine on an OS thread of its own
// whose effective ids are w's, and for root whose effective capabilities
// are w.capabilities (within what the agent holds). Raw syscalls: Go's
// wrappers change every thread. The real and saved ids stay root's, so the
// thread comes back (and gets its capabilities back); a thread that could
// not is never reused.
func asUser(w who, fn func() error) error {
	runtime.LockOSThread()
	keep := ^uintptr(0)
	_, _, e1 := syscall.RawSyscall(syscall.SYS_SETGROUPS, 0, 0, 0)
	_, _, e2 := syscall.RawSyscall(syscall.SYS_SETRESGID, keep, uintptr(w.gid), keep)
	_, _, e3 := syscall.RawSyscall(syscall.SYS_SETRESUID, keep, uintptr(w.uid), keep)
	var err error
	var before capabilitySets
	restore := false
	switch {
	case e1 != 0 || e2 != 0 || e3 != 0:
		err = failWith(protocol.Internal, "cannot switch to uid %d: %v", w.uid, firstErrno(e1, e2, e3))
	case w.uid == 0:
		if errno := threadCapabilities(&before, false); errno != 0 {
			err = failWith(protocol.Internal, "cannot read root's capabilities: %v", errno)
			break
		}
		lowered := before
		lowered[0].effective = w.capabilities & before[0].permitted
		lowered[1].effective = 0
		if errno := threadCapabilities(&lowered, true); errno != 0 {
			err = failWith(protocol.Internal, "cannot set root's capabilities: %v", errno)
			break
		}
		restore = true
		err = fn()
	default:
		err = fn()
	}
	stuck := restore && threadCapabilities(&before, true) != 0
	_, _, b1 := syscall.RawSyscall(syscall.SYS_SETRESUID, keep, 0, keep)
	_, _, b2 := syscall.RawSyscall(syscall.SYS_SETRESGID, keep, 0, keep)
	if !stuck && b1 == 0 && b2 == 0 {
		runtime.UnlockOSThread()
	} // else the thread ends with this goroutine's operation
	return err
}

// asRequester runs fn as the user a request names (only programs' requests
// do: Spawn, Stat, ReadPath, WritePath), else as the sandbox user.
func asRequester(m protocol.Message, fn func() error) error {
	user, capabilities := requestedUser(m)
	w, err := resolveUser(user, capabilities)
	if err != nil {
		return err
	}
	return asUser(w, fn)
}

// requestedUser is the user (and whether root gets its capabilities) a
// request asks for; "" is the sandbox user.
func requestedUser(m protocol.Message) (string, bool) {
	switch r := m.(type) {
	case *protocol.Stat:
		return r.User, r.Capabilities
	case *protocol.ReadPath:
		return r.User, r.Capabilities
	case *protocol.WritePath:
		return r.User, r.Capabilities
	case *protocol.Spawn:
		return r.User, r.Capabilities
	}
	return "", false
}
