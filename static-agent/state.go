package main

// The state a shell call leaves: its final directory and its exports.
// The command's bash reports them in an EXIT trap
// over a socket pair made per call: bash finds its end at fd stateFd, and
// the agent reads the other with SO_PASSCRED, so the kernel names the
// sender of every record; only the call's main process (bash itself) is
// believed. Under BusyBox's sh (Alpine, BusyBox-only images) the same
// report comes from its builtins: the directory, and the exports as its
// `export -p` prints them (shell-quoted), which the agent parses.

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"

	"toolrt/agent/protocol"
)

const (
	stateFd   = 63
	stateCap  = 128 * 1024
	recordMax = 65536
)

var shellOwnVars = map[string]bool{"PWD": true, "OLDPWD": true, "SHLVL": true, "_": true}

// wrapCommand is `command` preceded, on its own first
// line, by the state trap (and pipefail).
func wrapCommand(command string, report, pipefail, reportEnv bool) string {
	prelude := ""
	if report {
		env := ""
		if reportEnv {
			env = "builtin printf 'ENV\\0'; " +
				"while IFS= builtin read -r -d '' __toolrt_v; do " +
				"builtin printf '%s\\0' \"$__toolrt_v\"; done " +
				"< <(/usr/bin/env -0 && builtin printf 'ENV-END\\0'); "
		}
		dump := fmt.Sprintf("builtin set +eu; [[ -S /dev/fd/%d ]] && { "+
			"builtin printf 'toolrt-state-1\\0'; builtin pwd -P; builtin printf '\\0'; "+
			"%sbuiltin printf 'END\\0'; } >&%d", stateFd, env, stateFd)
		prelude = "builtin trap " + shellQuote("{ "+dump+"; } 2>/dev/null") + " EXIT; "
	}
	if pipefail {
		prelude += "set -o pipefail; "
	}
	return prelude + command
}

// wrapPosix is wrapCommand for BusyBox's sh, by its builtins (`command`
// skips functions of the same name): the exports as one item, the text
// `export -p` prints, between ENV-P and ENV-END.
func wrapPosix(command string, pipefail, reportEnv bool) string {
	env := ""
	if reportEnv {
		env = "command printf 'ENV-P\\0'; command export -p; command printf '\\0ENV-END\\0'; "
	}
	dump := fmt.Sprintf("set +eu; [ -S /dev/fd/%d ] && { "+
		"command printf 'toolrt-state-1\\0'; command pwd -P; command printf '\\0'; "+
		"%scommand printf 'END\\0'; } >&%d", stateFd, env, stateFd)
	prelude := "trap " + shellQuote("{ "+dump+"; } 2>/dev/null") + " EXIT; "
	if pipefail {
		prelude += "set -o pipefail; "
	}
	return prelude + command
}

// reportsState says whether `shell` can report its state: bash, or BusyBox's
// sh (dash, for one, cannot name descriptor 63).
func reportsState(shell string) bool {
	if shell == "/bin/bash" {
		return true
	}
	target, err := filepathEval(shell)
	return err == nil && path.Base(target) == "busybox"
}

func shellQuote(text string) string {
	return "'" + strings.ReplaceAll(text, "'", `'\''`) + "'"
}

// stateChannel is the agent's end of one call's state socket.
type stateChannel struct {
	file     *os.File
	peer     int // bash's end, given to the launcher
	shellPid int
	mu       sync.Mutex
	data     []byte
	tooLarge bool
	foreign  map[int32]int
	done     chan struct{}
}

func newStateChannel() (*stateChannel, error) {
	pair, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_SEQPACKET|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	if err := syscall.SetsockoptInt(pair[0], syscall.SOL_SOCKET, syscall.SO_PASSCRED, 1); err != nil {
		syscall.Close(pair[0])
		syscall.Close(pair[1])
		return nil, err
	}
	_ = syscall.SetNonblock(pair[0], true)
	return &stateChannel{
		file:    os.NewFile(uintptr(pair[0]), "state"),
		peer:    pair[1],
		foreign: map[int32]int{},
		done:    make(chan struct{}),
	}, nil
}

// read takes records while the shell runs (the socket queues few of them).
func (s *stateChannel) read() {
	defer close(s.done)
	raw, err := s.file.SyscallConn()
	if err != nil {
		return
	}
	pooled := getChunk()
	defer putChunk(pooled)
	buf := (*pooled)[:recordMax]
	oob := make([]byte, syscall.CmsgSpace(syscall.SizeofUcred))
	ended := false
	for !ended {
		err := raw.Read(func(fd uintptr) bool {
			for {
				more, end := s.take(int(fd), buf, oob)
				if end {
					ended = true
					return true
				}
				if !more {
					return false // empty: wait for the next record
				}
			}
		})
		if err != nil {
			return
		}
	}
}

// take reads one record; (whether the queue was empty, whether every
// writer is gone).
func (s *stateChannel) take(fd int, buf, oob []byte) (bool, bool) {
	n, oobn, flags, _, err := syscall.Recvmsg(fd, buf, oob, syscall.MSG_DONTWAIT)
	if err == syscall.EAGAIN || err == syscall.EINTR {
		return false, false
	}
	if err != nil {
		return false, true
	}
	pid := int32(-1)
	if messages, err := syscall.ParseSocketControlMessage(oob[:oobn]); err == nil {
		for _, m := range messages {
			if creds, err := syscall.ParseUnixCredentials(&m); err == nil {
				pid = creds.Pid
			}
		}
	}
	// Every writer is gone: no data and no sender (gVisor names pid 0).
	if n == 0 && pid <= 0 {
		return false, true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.shellPid == 0 || pid != int32(s.shellPid):
		s.foreign[pid] += n
	case flags&syscall.MSG_TRUNC != 0 || len(s.data)+n > stateCap:
		s.tooLarge = true
	default:
		s.data = append(s.data, buf[:n]...)
	}
	return true, false
}

// settle takes what is still queued and closes the channel. Called by the
// reaper once the shell has exited and before it reaps it, so that no other
// process can have its pid and every record still names its sender.
func (s *stateChannel) settle() {
	_ = s.file.SetReadDeadline(time.Now())
	<-s.done
	raw, err := s.file.SyscallConn()
	if err == nil {
		pooled := getChunk()
		defer putChunk(pooled)
		buf := (*pooled)[:recordMax]
		oob := make([]byte, syscall.CmsgSpace(syscall.SizeofUcred))
		_ = raw.Control(func(fd uintptr) {
			for i := 0; i < 4096; i++ {
				if more, end := s.take(int(fd), buf, oob); !more || end {
					return
				}
			}
		})
	}
	_ = s.file.Close()
}

// outcome is what the shell reported, if anything whole, and notes.
func (s *stateChannel) outcome(withEnv bool) (*protocol.ShellReport, []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var notes []string
	if len(s.foreign) > 0 {
		var pids []string
		total := 0
		for pid, n := range s.foreign {
			pids = append(pids, fmt.Sprint(pid))
			total += n
		}
		sort.Strings(pids)
		notes = append(notes, fmt.Sprintf("ignored %d bytes sent to this call's shell-state channel "+
			"by other processes (pid %s): only the command's shell reports its directory and exports",
			total, strings.Join(pids, ", ")))
	}
	if s.tooLarge {
		notes = append(notes, fmt.Sprintf("the shell's exports exceed %d bytes; its directory and "+
			"exports were not kept", stateCap))
		return nil, notes
	}
	if len(s.data) == 0 {
		return nil, notes // no report: an exec'd or killed shell, a replaced trap
	}
	report, note, err := parseReport(s.data, withEnv)
	if err != nil {
		notes = append(notes, fmt.Sprintf("the shell's state report was malformed (%v); its "+
			"directory and exports were not kept", err))
		return nil, notes
	}
	if note != "" {
		notes = append(notes, note)
	}
	return report, notes
}

// parseReport is state.parse_report.
func parseReport(data []byte, withEnv bool) (*protocol.ShellReport, string, error) {
	items := bytes.Split(data, []byte{0})
	last := len(items) - 1
	if len(items) < 4 || string(items[0]) != "toolrt-state-1" || len(items[last]) != 0 ||
		string(items[last-1]) != "END" {
		return nil, "", errors.New("not a whole report")
	}
	where := items[1]
	if len(where) > 0 && !(where[0] == '/' && where[len(where)-1] == '\n') {
		return nil, "", errors.New("the directory is not an absolute path")
	}
	report := protocol.NewShellReport()
	if len(where) > 0 {
		report.Cwd = strings.ToValidUTF8(string(where[:len(where)-1]), "\uFFFD")
	}
	rest := items[2 : last-1]
	if !withEnv {
		if len(rest) > 0 {
			return nil, "", errors.New("items after the directory")
		}
		return &report, "", nil
	}
	ends := 0
	for _, item := range rest {
		if string(item) == "ENV-END" {
			ends++
		}
	}
	if len(rest) == 0 || (string(rest[0]) != "ENV" && string(rest[0]) != "ENV-P") || ends > 1 {
		return nil, "", errors.New("no environment section")
	}
	if string(rest[len(rest)-1]) != "ENV-END" {
		return &report, "the shell could not list its exports; they were not kept", nil
	}
	entries := rest[1 : len(rest)-1]
	if string(rest[0]) == "ENV-P" {
		if len(entries) != 1 {
			return nil, "", errors.New("the exports are not one `export -p` listing")
		}
		var err error
		if entries, err = exportEntries(string(entries[0])); err != nil {
			return nil, "", err
		}
	}
	env := map[string]string{}
	for _, item := range entries {
		name, value, ok := bytes.Cut(item, []byte("="))
		if !ok || len(name) == 0 {
			return nil, "", errors.New("an environment entry without a name")
		}
		if !utf8.Valid(name) || !utf8.Valid(value) {
			continue // toolrt's env is text; such a variable cannot be kept
		}
		if !shellOwnVars[string(name)] {
			env[string(name)] = string(value)
		}
	}
	report.Env = env
	return &report, "", nil
}

// exportEntries turns what a POSIX shell's `export -p` printed (lines of
// `export NAME='value'`, values quoted as the shell reads them, possibly
// over several lines) into NAME=value entries; a name exported without a
// value is not in the environment and is left out.
func exportEntries(listing string) ([][]byte, error) {
	var entries [][]byte
	for at := 0; at < len(listing); {
		if listing[at] == '\n' {
			at++
			continue
		}
		if !strings.HasPrefix(listing[at:], "export ") {
			return nil, errors.New("an `export -p` line that is not an export")
		}
		at += len("export ")
		end := at
		for end < len(listing) && listing[end] != '=' && listing[end] != '\n' {
			end++
		}
		name := listing[at:end]
		if name == "" {
			return nil, errors.New("an export without a name")
		}
		if end == len(listing) || listing[end] == '\n' {
			at = end
			continue
		}
		value, next, err := shellWord(listing, end+1)
		if err != nil {
			return nil, err
		}
		entries = append(entries, []byte(name+"="+value))
		at = next
	}
	return entries, nil
}

// shellWord reads the shell word starting at `at` (single- and
// double-quoted parts, backslash escapes, bare characters) up to an
// unquoted newline or the end: its value, and where it ended.
func shellWord(text string, at int) (string, int, error) {
	var value strings.Builder
	for at < len(text) && text[at] != '\n' {
		switch text[at] {
		case '\'':
			end := strings.IndexByte(text[at+1:], '\'')
			if end < 0 {
				return "", 0, errors.New("an unterminated single quote in `export -p`")
			}
			value.WriteString(text[at+1 : at+1+end])
			at += end + 2
		case '"':
			at++
			for at < len(text) && text[at] != '"' {
				if text[at] == '\\' && at+1 < len(text) && strings.IndexByte("\"\\$`\n", text[at+1]) >= 0 {
					at++
				}
				value.WriteByte(text[at])
				at++
			}
			if at == len(text) {
				return "", 0, errors.New("an unterminated double quote in `export -p`")
			}
			at++
		case '\\':
			if at+1 == len(text) {
				return "", 0, errors.New("a backslash at the end of `export -p`")
			}
			value.WriteByte(text[at+1])
			at += 2
		default:
			value.WriteByte(text[at])
			at++
		}
	}
	return value.String(), at, nil
}

var filepathEval = filepath.EvalSymlinks
