package main

import (
	"testing"

	"toolrt/agent/protocol"
)

// The exec API's requests (runtime/agent/programs.py, program_files.py) are
// not ported yet: each is answered with an error naming it.
var notPorted = map[string]bool{"spawn": true, "stat": true, "read_path": true, "write_path": true}

// Every other request of protocol.py has a handler, and the daemon's chunks
// and credits reach their transfer.
func TestEveryRequestIsHandled(t *testing.T) {
	for _, op := range append(protocol.Requests, "data", "credit") {
		if _, ok := handlers[op]; ok == notPorted[op] {
			t.Errorf("%q: handled %v, listed as not ported %v", op, ok, notPorted[op])
		}
	}
}
