package main

// A shell started ahead of the session's next call.
//
// Starting a command costs the launcher and bash's start-up, on the call's
// path. While the session is idle (no call running) the agent starts the
// next call's shell ahead, exactly as any command starts: own session, the
// next call's group, the sandbox user, the syscall filter, the cwd of the
// latest call and the session's own environment (Exec.spare_env: never a
// call's one-call `env`), its stdout and stderr pipes, stdin from /dev/null.
// That bash runs spareBoot: it blocks reading one byte from spareGoFd, then
// reads its script from spareScriptFd and evals it.
//
// A call uses the spare only when nothing it relies on can differ from a
// shell started for it: the same cwd (the same directory, owner and mode as
// when the spare started), an environment that is the spare's or differs
// from it only in plain variables (set or unset by the script's preamble,
// on the command's first line so bash's line numbers stay the command's),
// no stdin, no NUL in the command, no terminal. Anything else, and any doubt
// (the spare died or was stopped, its launcher failed, something wrote into
// its pipes, its script could have been changed), starts the call's shell
// the usual way; so does a call that comes while the spare is still
// starting (it is left for a later call: no call ever waits for one). The
// preamble also gives the command what its own start would have: stderr on
// stdout when merged, no shell-state channel when the call reports none.
// The one difference a command can see: a syntax error is reported as
// `bash: eval: line N` rather than `bash: -c: line N`.
//
// Other processes of the sandbox user can reach the spare's descriptors
// through /proc/<pid>/fd. The go byte travels on a socket (which cannot be
// reopened that way); the script in a memfd (a regular file, which bash
// reads in a few calls rather than a byte at a time) that is sealed and
// read back before the go byte; output pipes that held anything before the
// call are not used. (A process allowed to ptrace the sandbox user's
// processes can change any command's run, a spare's or not.)
//
// Bash only: the boot line needs bash's `read -n 1 -u` and `read -d ''`,
// which a POSIX sh lacks, so under any other shell no spare starts.

import (
	"bytes"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"toolrt/agent/protocol"
)

const (
	spareGoFd     = 60
	spareScriptFd = 61
	// A launcher that has not exec'd bash by then never will (it was
	// stopped): its spare is discarded rather than waited for.
	spareStale = 5 * time.Second
)

var spareBoot = "IFS= builtin read -r -n 1 -u " + strconv.Itoa(spareGoFd) + " __toolrt_g || builtin exit 0; " +
	"IFS= builtin read -r -d '' -u " + strconv.Itoa(spareScriptFd) + " __toolrt_s; " +
	"exec " + strconv.Itoa(spareGoFd) + "<&- " + strconv.Itoa(spareScriptFd) + "<&-; " +
	`builtin eval "$__toolrt_s"`

// Variables a preamble may set or unset and get what bash's own start with
// them in its environment would have given. Bash reads the others at
// start-up (BASH_ENV, SHELLOPTS, exported functions...), keeps them
// read-only (UID...) or sets them itself (PWD, SHLVL...): a call differing
// in those starts its own shell.
var (
	plainName   = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	startupVars = map[string]bool{
		"ENV": true, "SHELLOPTS": true, "SHLVL": true, "PWD": true, "OLDPWD": true, "IFS": true,
		"PS4": true, "POSIXLY_CORRECT": true, "UID": true, "EUID": true, "PPID": true,
		"GROUPS": true, "HOSTNAME": true, "HOSTTYPE": true, "OSTYPE": true, "MACHTYPE": true,
		"RANDOM": true, "SRANDOM": true, "SECONDS": true, "LINENO": true, "FUNCNAME": true,
		"HISTCMD": true, "OPTIND": true, "OPTERR": true, "TMOUT": true, "COLUMNS": true,
		"LINES": true, "DIRSTACK": true, "PIPESTATUS": true, "CDPATH": true, "GLOBIGNORE": true,
		"TERM": true, "_": true,
	}
)

func plainVar(name string) bool {
	return plainName.MatchString(name) && !startupVars[name] && !strings.HasPrefix(name, "BASH")
}

// ansiQuote is `value` as one ANSI-C quoted word on one line ($'...').
// Byte by byte: the bytes of a multibyte character are all above 0x7f.
func ansiQuote(value string) string {
	var out strings.Builder
	out.WriteString("$'")
	for i := 0; i < len(value); i++ {
		c := value[i]
		switch {
		case c == '\\' || c == '\'':
			out.WriteByte('\\')
			out.WriteByte(c)
		case c < ' ' || c == 0x7f:
			out.WriteString(`\x`)
			out.WriteString(strconv.FormatUint(uint64(c)>>4, 16))
			out.WriteString(strconv.FormatUint(uint64(c)&15, 16))
		default:
			out.WriteByte(c)
		}
	}
	out.WriteByte('\'')
	return out.String()
}

// envPreamble is the builtins that turn environment `had` into `wanted`;
// false when a variable that differs is not plain.
func envPreamble(had, wanted map[string]string) (string, bool) {
	var parts []string
	for name := range had {
		if _, kept := wanted[name]; kept {
			continue
		}
		if !plainVar(name) {
			return "", false
		}
		parts = append(parts, "builtin unset -v "+name+"; ")
	}
	for name, value := range wanted {
		if before, ok := had[name]; ok && before == value {
			continue
		}
		if !plainVar(name) {
			return "", false
		}
		parts = append(parts, "builtin export "+name+"="+ansiQuote(value)+"; ")
	}
	sort.Strings(parts)
	return strings.Join(parts, ""), true
}

// exportsFunctions says whether `env` exports shell functions: one named
// `exec` or `eval` would run in the spare's place (`builtin exec` cannot
// redirect the shell).
func exportsFunctions(env map[string]string) bool {
	for name := range env {
		if strings.HasPrefix(name, "BASH_FUNC_") {
			return true
		}
	}
	return false
}

// dirID is what decides whether a shell may be in a directory: which
// directory it is, its owner and mode.
type dirID struct {
	dev, ino       uint64
	mode, uid, gid uint32
}

func directoryID(path string) (dirID, bool) {
	var st syscall.Stat_t
	if strings.IndexByte(path, 0) >= 0 || syscall.Stat(path, &st) != nil {
		return dirID{}, false
	}
	return dirID{uint64(st.Dev), st.Ino, st.Mode, st.Uid, st.Gid}, true
}

// sparePlan is where and with what environment the next spare starts: the
// latest call's cwd (as its shell left it) and the session's environment.
type sparePlan struct {
	cwd string
	env map[string]string
}

// spare is one started shell waiting for its script, and the agent's ends.
type spare struct {
	pid     int
	group   uint32
	cwd     string
	cwdID   dirID
	env     map[string]string
	outR    int
	errR    int
	reportR int
	goSock  int
	script  int
	state   *stateChannel
	exit    chan syscall.WaitStatus
	born    time.Time
	// Set by the reaper's hook: reaped (its pid may be another's now).
	dead atomic.Bool
	// Set before the go byte: a call's shell now, reporting its state or not.
	taken     atomic.Bool
	reporting atomic.Bool
}

// startSpare starts a spare as `plan` says; nil when its directory cannot
// be looked at, its environment exports functions, or a start fails.
// `reaped` is told when it dies before a call takes it.
func (r *Runner) startSpare(plan *sparePlan, reaped func(*spare)) *spare {
	cwdID, ok := directoryID(plan.cwd)
	if !ok || exportsFunctions(plan.env) {
		return nil
	}
	var ours, theirs []int
	closeAll := func(fds []int) {
		for _, fd := range fds {
			_ = syscall.Close(fd)
		}
	}
	defer func() { closeAll(theirs) }() // the child has its copies
	fail := func() *spare {
		closeAll(ours)
		return nil
	}
	stdin, err := syscall.Open(os.DevNull, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return fail()
	}
	theirs = append(theirs, stdin)
	for i := 0; i < 3; i++ { // stdout, stderr, the launcher's report
		var p [2]int
		if syscall.Pipe2(p[:], syscall.O_CLOEXEC) != nil {
			return fail()
		}
		ours, theirs = append(ours, p[0]), append(theirs, p[1])
	}
	pair, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return fail()
	}
	ours, theirs = append(ours, pair[0]), append(theirs, pair[1])
	script, err := memfdCreate("toolrt-call")
	if err != nil {
		return fail()
	}
	ours = append(ours, script)
	state, err := newStateChannel()
	if err != nil {
		return fail()
	}
	theirs = append(theirs, state.peer)
	sp := &spare{cwd: plan.cwd, cwdID: cwdID, env: plan.env, outR: ours[0],
		errR: ours[1], reportR: ours[2], goSock: ours[3], script: script, state: state}
	files := make([]uintptr, stateFd+1)
	for i := range files {
		files[i] = ^uintptr(0) // closed in the child
	}
	for i, fd := range theirs[:4] {
		files[i] = uintptr(fd)
	}
	files[spareGoFd], files[spareScriptFd], files[stateFd] = uintptr(pair[1]), uintptr(script), uintptr(state.peer)
	hook := &exitHook{
		started: func(pid int) { state.shellPid = pid },
		before: func() {
			sp.dead.Store(true)
			switch {
			case sp.reporting.Load():
				state.settle() // a call's shell: its report, as any call's
			case !sp.taken.Load():
				go reaped(sp)
			}
		},
	}
	holder := &Call{request: &protocol.Exec{Cwd: plan.cwd}}
	sp.exit, err = r.launchWith(holder, plan.env, []string{"/bin/bash", "-c", spareBoot}, files, hook)
	if err != nil {
		_ = state.file.Close()
		return fail()
	}
	sp.pid, sp.group, sp.born = holder.pid, holder.group, time.Now()
	for _, fd := range []int{sp.outR, sp.errR, sp.reportR} {
		_ = syscall.SetNonblock(fd, true)
	}
	return sp
}

// ready says whether the spare's bash runs and waits: its launcher's report
// pipe closed empty (the launcher exec'd bash), and it is neither stopped
// nor dead (another process of the sandbox user may have signalled it).
// `starting` while its launcher is still at work: a call never waits for a
// spare (under gVisor a start takes tens of milliseconds).
func (r *Runner) ready(sp *spare) (ok, starting bool) {
	var data []byte
	buf := make([]byte, 4*reportSize)
	for len(data) <= 4*reportSize {
		n, err := syscall.Read(sp.reportR, buf)
		switch {
		case err == syscall.EAGAIN || err == syscall.EINTR:
			young := len(data) == 0 && time.Since(sp.born) < spareStale
			return false, young
		case err != nil:
			return false, false
		case n == 0:
			return len(data) == 0 && r.waiting(sp), false
		}
		data = append(data, buf[:n]...)
	}
	return false, false
}

// waiting says whether the spare is a live process that is not stopped;
// looked at while the reaper cannot take it, so its pid is still its own.
func (r *Runner) waiting(sp *spare) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, unreaped := r.exits[sp.pid]; !unreaped || sp.dead.Load() {
		return false
	}
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(sp.pid) + "/stat")
	if err != nil {
		return false
	}
	rest := stat[bytes.LastIndexByte(stat, ')')+1:]
	if len(rest) < 2 {
		return false
	}
	return !bytes.ContainsAny(rest[1:2], "TtZXx")
}

// scriptFor is what the spare evals to become the call's shell; false
// when it cannot.
func scriptFor(sp *spare, env map[string]string, command string, merge, state bool) ([]byte, bool) {
	if strings.IndexByte(command, 0) >= 0 || exportsFunctions(env) {
		return nil, false
	}
	adjust, ok := envPreamble(sp.env, env)
	if !ok {
		return nil, false
	}
	preamble := "builtin unset -v __toolrt_g __toolrt_s; "
	if merge {
		preamble += "exec 2>&1; "
	}
	if !state {
		preamble += "exec " + strconv.Itoa(stateFd) + ">&-; "
	}
	return []byte(preamble + adjust + command), true
}

// untouched says whether nothing was written into the spare's output pipes
// while it waited: it writes nothing before its script, so any byte there
// came from another process (through /proc/<pid>/fd) and would pass for
// the call's output.
func untouched(sp *spare) bool {
	var one [1]byte
	for _, fd := range []int{sp.outR, sp.errR} {
		n, err := syscall.Read(fd, one[:])
		switch {
		case err == syscall.EAGAIN || err == syscall.EINTR:
		case err != nil || n > 0:
			return false
		}
	}
	return true
}

// Memfd seals (F_ADD_SEALS and F_SEAL_*: fcntl.h).
const (
	fAddSeals  = 1033
	sealsWrite = 1 | 2 | 4 | 8 // SEAL, SHRINK, GROW, WRITE
)

// seal puts the script in the spare's memfd, sealed against any change,
// and reads it back; false when it could have been changed. Other processes
// of the sandbox user can reopen the memfd through /proc/<pid>/fd: only
// what is read back after the seal is what the spare will read.
func seal(sp *spare, script []byte) bool {
	if syscall.Ftruncate(sp.script, 0) != nil {
		return false
	}
	if n, err := syscall.Pwrite(sp.script, script, 0); err != nil || n != len(script) {
		return false
	}
	if _, _, errno := syscall.Syscall(syscall.SYS_FCNTL, uintptr(sp.script), fAddSeals, sealsWrite); errno != 0 {
		return false
	}
	back := make([]byte, len(script)+1)
	n, err := syscall.Pread(sp.script, back, 0)
	return err == nil && bytes.Equal(back[:n], script)
}

// goAhead sends the go byte, on a socket nobody can reopen: the spare
// reads its script now.
func goAhead(sp *spare) bool {
	n, err := syscall.Write(sp.goSock, []byte("g"))
	return err == nil && n == 1
}

// discard kills an unused spare (the reaper takes it) and closes the
// agent's ends.
func (r *Runner) discard(sp *spare) {
	r.signalUnreaped(sp.pid, syscall.SIGKILL)
	for _, fd := range []int{sp.outR, sp.errR, sp.reportR, sp.goSock, sp.script} {
		_ = syscall.Close(fd)
	}
	_ = sp.state.file.Close()
}

// signalUnreaped signals `pid` while it is a started command's, not yet
// reaped (so never a process that took its pid since). gVisor may refuse a
// KILL mid-exec: the closed go socket then ends a spare too.
func (r *Runner) signalUnreaped(pid int, sig syscall.Signal) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, unreaped := r.exits[pid]; unreaped {
		_ = syscall.Kill(pid, sig)
	}
}
