package main

import (
	"encoding/hex"
	"encoding/json"
	"os"
	"strings"
	"testing"
)

// The filter is the Python agent's to the byte (testdata written by
// scripts/gen_agent_golden.py from runtime/agent/seccomp.py).
func TestFilterIsThePythonAgents(t *testing.T) {
	for _, machine := range []string{"x86_64", "aarch64"} {
		want, err := os.ReadFile("testdata/seccomp-" + machine + ".hex")
		if err != nil {
			t.Fatal(err)
		}
		got, err := filterProgram(machine)
		if err != nil {
			t.Fatal(err)
		}
		if hex.EncodeToString(got) != strings.TrimSpace(string(want)) {
			t.Errorf("%s: the filters differ", machine)
		}
	}
	if _, err := filterProgram("sparc"); err == nil {
		t.Error("a filter for an unknown architecture")
	}
}

// The shell-state trap is the Python agent's to the byte (state.wrap_command).
func TestWrapCommandIsThePythonAgents(t *testing.T) {
	data, err := os.ReadFile("testdata/wrap_command.json")
	if err != nil {
		t.Fatal(err)
	}
	var cases [][]any
	if err := json.Unmarshal(data, &cases); err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		got := wrapCommand(c[0].(string), c[1].(bool), c[2].(bool), c[3].(bool))
		if got != c[4].(string) {
			t.Errorf("%v:\n got %s\nwant %s", c[:4], got, c[4])
		}
	}
}
