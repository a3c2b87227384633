package main

// The ring a background process's output goes to (background.Ring).

import (
	"math"
	"sync"
)

// ring is the newest `cap` bytes of a stream, and how far a reader has got.
type ring struct {
	mu      sync.Mutex
	cap     int
	buf     []byte
	total   int64
	readPos int64
}

func newRing(cap int64) *ring {
	if cap < 1 {
		cap = 1
	}
	if cap > math.MaxInt32 {
		cap = math.MaxInt32
	}
	return &ring{cap: int(cap)}
}

func (r *ring) add(data []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.buf = append(r.buf, data...)
	r.total += int64(len(data))
	// Trim in batches so a flood of small writes stays linear.
	if len(r.buf) > r.cap+readChunk {
		r.trim()
	}
}

func (r *ring) trim() {
	if excess := len(r.buf) - r.cap; excess > 0 {
		r.buf = append(r.buf[:0:0], r.buf[excess:]...)
	}
}

// read is what was written since the last read and how many bytes of it
// fell off the ring. With wholeChars, a UTF-8 character still being
// written waits for the next read instead of being cut in two.
func (r *ring) read(wholeChars bool) ([]byte, int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.trim()
	start := r.total - int64(len(r.buf))
	dropped := start - r.readPos
	if dropped < 0 {
		dropped = 0
	}
	from := r.readPos - start
	if from < 0 {
		from = 0
	}
	data := append([]byte(nil), r.buf[from:]...)
	if wholeChars {
		data = data[:len(data)-partialUTF8Tail(data)]
	}
	if start > r.readPos {
		r.readPos = start
	}
	r.readPos += int64(len(data))
	return data, dropped
}

func (r *ring) unread() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.total - r.readPos
}

// partialUTF8Tail is how many bytes at the end of data start a UTF-8
// character not yet complete.
func partialUTF8Tail(data []byte) int {
	for back := 1; back <= 4 && back <= len(data); back++ {
		b := data[len(data)-back]
		if b&0xC0 == 0x80 {
			continue // a continuation byte: its lead is further back
		}
		need := 1
		switch {
		case b >= 0xF0:
			need = 4
		case b >= 0xE0:
			need = 3
		case b >= 0xC0:
			need = 2
		}
		if need > back {
			return back
		}
		return 0
	}
	return 0
}
