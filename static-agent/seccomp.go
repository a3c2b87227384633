package main

// The syscall filter the agent and every command run under, on top of the
// engine's: the program the Python agent's seccomp.py built (a test holds it
// to those bytes, testdata/seccomp-*.hex). The agent installs it on itself
// at start (confineSelf); the C launcher installs it again right before it
// execs a command. It refuses io_uring, bpf, userfaultfd, perf_event_open,
// the keyrings, mount and umount, user namespaces (unshare and clone with
// CLONE_NEWUSER), sockets other than unix, IPv4, IPv6 and netlink's route
// family (EPERM), and clone3 (ENOSYS, so libcs fall back to clone, whose
// flags a filter can see).

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"runtime"
	"syscall"
	"unsafe"
)

const (
	bpfLdWAbs     = 0x20
	bpfJeqK       = 0x15
	bpfJgeK       = 0x35
	bpfJsetK      = 0x45
	bpfRetK       = 0x06
	retAllow      = 0x7FFF0000
	retErrno      = 0x00050000
	offsetNr      = 0
	offsetArch    = 4
	offsetArg0    = 16
	x32SyscallBit = 0x40000000
	cloneNewUser  = 0x10000000
	offsetArg2    = offsetArg0 + 16
	afNetlink     = 16
	netlinkRoute  = 0
)

// socket and socketpair only of these families (and AF_NETLINK's
// NETLINK_ROUTE): unix, IPv4, IPv6.
var families = []uint32{1, 2, 10}

type arch struct {
	audit   uint32
	numbers map[string]uint32
}

var arches = map[string]arch{
	"x86_64": {0xC000003E, map[string]uint32{
		"io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
		"bpf": 321, "userfaultfd": 323, "perf_event_open": 298, "keyctl": 250,
		"add_key": 248, "request_key": 249, "mount": 165, "umount2": 166,
		"unshare": 272, "clone": 56, "clone3": 435, "socket": 41, "socketpair": 53,
	}},
	"aarch64": {0xC00000B7, map[string]uint32{
		"io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
		"bpf": 280, "userfaultfd": 282, "perf_event_open": 241, "keyctl": 219,
		"add_key": 217, "request_key": 218, "mount": 40, "umount2": 39,
		"unshare": 97, "clone": 220, "clone3": 435, "socket": 198, "socketpair": 199,
	}},
}

var refused = []string{
	"io_uring_setup", "io_uring_enter", "io_uring_register", "bpf", "userfaultfd",
	"perf_event_open", "keyctl", "add_key", "request_key", "mount", "umount2",
}

// Refused only when their first argument asks for a user namespace.
var flagged = []string{"unshare", "clone"}

// Refused unless their first argument is one of families (or AF_NETLINK
// with NETLINK_ROUTE as their third).
var sockets = []string{"socket", "socketpair"}

type insn struct {
	code   uint16
	k      uint32
	jt, jf string // a label, or "" for the next instruction
}

// filterProgram is the filter for `machine` as struct sock_filter bytes.
func filterProgram(machine string) ([]byte, error) {
	a, ok := arches[machine]
	if !ok {
		return nil, fmt.Errorf("no syscall filter for architecture %q", machine)
	}
	body := []insn{
		{bpfLdWAbs, offsetArch, "", ""},
		{bpfJeqK, a.audit, "", "deny"},
		{bpfLdWAbs, offsetNr, "", ""},
	}
	if machine == "x86_64" {
		body = append(body, insn{bpfJgeK, x32SyscallBit, "deny", ""})
	}
	for _, name := range refused {
		body = append(body, insn{bpfJeqK, a.numbers[name], "deny", ""})
	}
	body = append(body, insn{bpfJeqK, a.numbers["clone3"], "enosys", ""})
	for _, name := range flagged {
		body = append(body, insn{bpfJeqK, a.numbers[name], "flags", ""})
	}
	for _, name := range sockets {
		body = append(body, insn{bpfJeqK, a.numbers[name], "family", ""})
	}
	body = append(body, insn{bpfRetK, retAllow, "", ""})
	// The checks of arguments, then the answers they jump to (BPF jumps
	// only forward).
	labels := map[string]int{"flags": len(body)}
	body = append(body,
		insn{bpfLdWAbs, offsetArg0, "", ""},
		insn{bpfJsetK, cloneNewUser, "deny", "allow"},
	)
	labels["family"] = len(body)
	body = append(body, insn{bpfLdWAbs, offsetArg0, "", ""})
	for _, family := range families {
		body = append(body, insn{bpfJeqK, family, "allow", ""})
	}
	body = append(body,
		insn{bpfJeqK, afNetlink, "", "eafnosupport"},
		insn{bpfLdWAbs, offsetArg2, "", ""},
		insn{bpfJeqK, netlinkRoute, "allow", "eprotonosupport"},
	)
	for _, answer := range []struct {
		label string
		k     uint32
	}{
		{"allow", retAllow},
		{"deny", retErrno | uint32(syscall.EPERM)},
		{"enosys", retErrno | uint32(syscall.ENOSYS)},
		{"eafnosupport", retErrno | uint32(syscall.EAFNOSUPPORT)},
		{"eprotonosupport", retErrno | uint32(syscall.EPROTONOSUPPORT)},
	} {
		labels[answer.label] = len(body)
		body = append(body, insn{bpfRetK, answer.k, "", ""})
	}
	out := make([]byte, 0, 8*len(body))
	for at, in := range body {
		jump := func(label string) byte {
			if label == "" {
				return 0
			}
			return byte(labels[label] - at - 1)
		}
		out = binary.LittleEndian.AppendUint16(out, in.code)
		out = append(out, jump(in.jt), jump(in.jf))
		out = binary.LittleEndian.AppendUint32(out, in.k)
	}
	return out, nil
}

// filterHex is the filter of this machine in hex, as the launcher takes it.
func filterHex() (string, error) {
	program, err := filterProgram(machine())
	if err != nil {
		return "", err
	}
	return hex.EncodeToString(program), nil
}

func machine() string {
	var u syscall.Utsname
	if syscall.Uname(&u) != nil {
		return ""
	}
	b := make([]byte, 0, len(u.Machine))
	for _, c := range u.Machine {
		if c == 0 {
			break
		}
		b = append(b, byte(c))
	}
	return string(b)
}

const (
	prSetNoNewPrivs        = 38
	seccompSetModeFilter   = 1
	seccompFilterFlagTsync = 1
)

// confineSelf puts every thread of the agent under the filter its commands
// run under (stacked on the engine's), as the Python agent did: a command
// that subverted the agent would still be refused what a command is. With
// no_new_privs first, so no capability is needed (the engine sets it in a
// container already), and TSYNC, since the Go runtime has threads by now.
func confineSelf() error {
	program, err := filterProgram(machine())
	if err != nil {
		return err
	}
	if _, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, prSetNoNewPrivs, 1, 0); errno != 0 {
		return fmt.Errorf("prctl(PR_SET_NO_NEW_PRIVS): %v", errno)
	}
	prog := struct {
		length uint16
		_      [6]byte
		filter *byte
	}{uint16(len(program) / 8), [6]byte{}, &program[0]}
	_, _, errno := syscall.RawSyscall(sysSeccomp, seccompSetModeFilter, seccompFilterFlagTsync,
		uintptr(unsafe.Pointer(&prog)))
	runtime.KeepAlive(program)
	if errno != 0 {
		return fmt.Errorf("seccomp(SECCOMP_SET_MODE_FILTER): %v", errno)
	}
	return nil
}
