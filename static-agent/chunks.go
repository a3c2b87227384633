package main

// The 64 KiB read buffers every call uses (its output streams, its shell's
// state channel, a read_file window) come from one pool instead of being
// allocated and zeroed for each call. A buffer goes back only when its
// reader returns: everything read into it has been copied by then (the
// capture, the ring, an encoded frame, the state report).

import "sync"

const chunkSize = 64 << 10

// Every user of the pool reads at most chunkSize bytes at once.
var (
	_ = [chunkSize - readChunk]struct{}{}
	_ = [chunkSize - recordMax]struct{}{}
	_ = [chunkSize - windowChunk]struct{}{}
)

var chunks = sync.Pool{New: func() any {
	buf := make([]byte, chunkSize)
	return &buf
}}

// getChunk is a buffer of chunkSize bytes, not zeroed; putChunk returns it.
func getChunk() *[]byte { return chunks.Get().(*[]byte) }

func putChunk(buf *[]byte) { chunks.Put(buf) }
