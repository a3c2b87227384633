package main

// Calls' answers kept until the daemon has stored them: the
// engine drops what the agent writes while no daemon is attached, and a
// daemon may die between a call's answer and storing it. Every answer of a
// call with a call id is kept by call id until an Ack; a later daemon learns
// from the hello which calls still run and which answers wait, and gets one
// by sending the call again with `resume`: a kept answer comes back at once,
// a running call answers that request too when it ends, a call id never
// seen runs as new, and one whose answer was dropped is OUTCOME_UNKNOWN
// rather than run twice.

import (
	"container/list"

	"toolrt/agent/protocol"
)

const (
	keepCount = 1024
	keepBytes = 64 << 20
	seenIDs   = 65536
)

type answer struct {
	callID  string
	message protocol.Message
	body    []byte
}

// waiter is a later daemon's request for a running call's answer.
type waiter struct{ id, epoch int64 }

// kept is guarded by Agent.mu.
type kept struct {
	answers map[string]*list.Element // of *answer, oldest first in order
	order   list.List
	bytes   int
	seen    map[string]*list.Element // of string, oldest first in seenOrder
	seenOrd list.List
	running map[string][]waiter
}

func newKept() *kept {
	return &kept{answers: map[string]*list.Element{}, seen: map[string]*list.Element{},
		running: map[string][]waiter{}}
}

func (k *kept) saw(callID string) {
	if e, ok := k.seen[callID]; ok {
		k.seenOrd.MoveToBack(e)
	} else {
		k.seen[callID] = k.seenOrd.PushBack(callID)
	}
	for k.seenOrd.Len() > seenIDs {
		oldest := k.seenOrd.Front()
		delete(k.seen, oldest.Value.(string))
		k.seenOrd.Remove(oldest)
	}
}

func (k *kept) keep(a *answer) {
	k.saw(a.callID)
	k.forget(a.callID)
	k.answers[a.callID] = k.order.PushBack(a)
	k.bytes += len(a.body)
	for k.order.Len() > keepCount || k.bytes > keepBytes {
		k.forget(k.order.Front().Value.(*answer).callID)
	}
}

func (k *kept) forget(callID string) {
	if e, ok := k.answers[callID]; ok {
		k.bytes -= len(e.Value.(*answer).body)
		k.order.Remove(e)
		delete(k.answers, callID)
	}
}

func (k *kept) unacked() []string {
	ids := make([]string, 0, k.order.Len())
	for e := k.order.Front(); e != nil; e = e.Next() {
		ids = append(ids, e.Value.(*answer).callID)
	}
	return ids
}

// resumed answers a resumed call (an Exec or a Write) this agent knows
// (now, or when it ends); false when it never saw the call id, which then
// runs as new.
func (a *Agent) resumed(id, epoch int64, callID string, resume bool) bool {
	if !resume || callID == "" {
		return false
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	k := a.kept
	if waiters, running := k.running[callID]; running {
		k.running[callID] = append(waiters, waiter{id, epoch})
		return true
	}
	if e, ok := k.answers[callID]; ok {
		kept := e.Value.(*answer)
		go a.sendEpoch(kept.message, id, epoch, kept.body)
		return true
	}
	if _, ok := k.seen[callID]; ok {
		f := protocol.NewFailure()
		f.Code = protocol.OutcomeUnknown
		f.Message = "the sandbox ran this call but no longer keeps its result " +
			"(it keeps the latest 1024); it was not run again"
		go a.sendEpoch(&f, id, epoch, nil)
		return true
	}
	return false
}

// starting marks a call with a call id as running.
func (a *Agent) starting(callID string) {
	if callID == "" {
		return
	}
	a.mu.Lock()
	a.kept.running[callID] = nil
	a.mu.Unlock()
}

// notStarted answers a call that did nothing (an exact Write that met a
// link): nothing is kept, and the call id is not running any more, so the
// daemon's next request under it runs as new (as do later daemons' waiting
// requests, answered the same).
func (a *Agent) notStarted(id, epoch int64, callID string, m protocol.Message) {
	var waiters []waiter
	if callID != "" {
		a.mu.Lock()
		waiters = a.kept.running[callID]
		delete(a.kept.running, callID)
		a.mu.Unlock()
	}
	a.sendEpoch(m, id, epoch, nil)
	for _, w := range waiters {
		a.sendEpoch(m, w.id, w.epoch, nil)
	}
}

// answerCall is a call's one answer: kept by call id, sent to the request
// (in its daemon's epoch) and to every later request waiting for it.
func (a *Agent) answerCall(id, epoch int64, callID string, m protocol.Message, body []byte) {
	var waiters []waiter
	if callID != "" {
		a.mu.Lock()
		waiters = a.kept.running[callID]
		delete(a.kept.running, callID)
		a.kept.keep(&answer{callID, m, body})
		a.mu.Unlock()
	}
	a.sendEpoch(m, id, epoch, body)
	for _, w := range waiters {
		a.sendEpoch(m, w.id, w.epoch, body)
	}
}

func init() {
	handle("ack", func(a *Agent, _ *protocol.Frame, m protocol.Message) {
		a.mu.Lock()
		defer a.mu.Unlock()
		for _, callID := range m.(*protocol.Ack).CallIds {
			a.kept.forget(callID)
		}
	})
}
