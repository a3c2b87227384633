package main

import (
	"strings"
	"syscall"
	"testing"

	"toolrt/agent/protocol"
)

func TestArgvIsNulTerminatedArguments(t *testing.T) {
	got := decodeArgv([]byte("ls\x00-l\x00\x00"))
	if strings.Join(got, "|") != "ls|-l|" {
		t.Errorf("got %q", got)
	}
	for _, body := range []string{"", "ls", "ls\x00-l"} {
		if got := decodeArgv([]byte(body)); got != nil {
			t.Errorf("%q: got %q, want none", body, got)
		}
	}
}

func TestExecFailuresHaveTheClientsReasons(t *testing.T) {
	p := &program{request: &protocol.Spawn{Cwd: "/nowhere"}, argv: []string{"nope"}}
	cases := []struct {
		stage int32
		errno syscall.Errno
		code  string
		text  string
	}{
		{stageExec, syscall.ENOENT, protocol.FileNotFound, "nope: No such file or directory"},
		{stageExec, syscall.EACCES, protocol.PermissionDenied, "nope: Permission denied"},
		{stageExec, syscall.ENOTDIR, protocol.FileNotFound, "nope: Not a directory"},
		{stageCwd, syscall.ENOTDIR, protocol.NotADirectory, "cwd /nowhere: Not a directory"},
		{stageCwd, syscall.ENOENT, protocol.FileNotFound, "cwd /nowhere: No such file or directory"},
	}
	for _, c := range cases {
		code, text := execFailure(p, c.stage, c.errno)
		if code != c.code || text != c.text {
			t.Errorf("%d %v: got %s %q", c.stage, c.errno, code, text)
		}
	}
}
