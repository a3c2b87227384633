package main

import (
	"testing"

	"toolrt/agent/protocol"
)

// Every request of protocol.py has a handler: none is answered as not
// implemented, and the daemon's chunks and credits reach their transfer.
func TestEveryRequestIsHandled(t *testing.T) {
	for _, op := range append(protocol.Requests, "data", "credit") {
		if _, ok := handlers[op]; !ok {
			t.Errorf("no handler for %q", op)
		}
	}
}
