package main

import (
	"encoding/hex"
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
