package main

import (
	"testing"

	"toolrt/agent/protocol"
)

// Every request of protocol.py has a handler, and the daemon's chunks,
// credits and a program's stdin and signals reach their transfer or program.
func TestEveryRequestIsHandled(t *testing.T) {
	for _, op := range append(protocol.Requests, "data", "credit", "stdin", "signal") {
		if _, ok := handlers[op]; !ok {
			t.Errorf("%q: no handler", op)
		}
	}
}
