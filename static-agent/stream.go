package main

// One output stream of a command: the head and the tail of what it wrote
// within the call's cap, streamed as Output
// events when the request asks. When the main process has exited the
// stream is cut: what it wrote before is taken, and from then on whatever
// its background children write is read and dropped, so that they neither
// block on a full pipe nor die of SIGPIPE.

import (
	"bytes"
	"errors"
	"os"
	"sync"
	"syscall"
	"time"

	"toolrt/agent/protocol"
)

type capture struct {
	headCap, tailCap int
	head, tail       []byte
	total            int64
	droppedLines     int64
}

func newCapture(cap int64, headFraction float64) *capture {
	head := int(float64(cap) * headFraction)
	if head < 0 {
		head = 0
	}
	tail := int(cap) - head
	if tail < 0 {
		tail = 0
	}
	return &capture{headCap: head, tailCap: tail}
}

func (c *capture) add(data []byte) {
	c.total += int64(len(data))
	if room := c.headCap - len(c.head); room > 0 {
		if room > len(data) {
			room = len(data)
		}
		c.head = append(c.head, data[:room]...)
		data = data[room:]
	}
	if len(data) == 0 {
		return
	}
	c.tail = append(c.tail, data...)
	// Trim lazily so a flood of small reads stays linear.
	if len(c.tail) > 2*c.tailCap+readChunk {
		c.trim()
	}
}

func (c *capture) trim() {
	if excess := len(c.tail) - c.tailCap; excess > 0 {
		c.droppedLines += int64(bytes.Count(c.tail[:excess], []byte("\n")))
		c.tail = append(c.tail[:0:0], c.tail[excess:]...)
	}
}

// finish appends head then tail to `body` and says how it was cut.
func (c *capture) finish(body *bytes.Buffer) protocol.CaptureInfo {
	c.trim()
	body.Write(c.head)
	body.Write(c.tail)
	info := protocol.NewCaptureInfo()
	info.Head, info.Tail = int64(len(c.head)), int64(len(c.tail))
	info.Total, info.DroppedLines = c.total, c.droppedLines
	return info
}

type stream struct {
	file    *os.File
	name    string
	mu      sync.Mutex
	capture *capture
	// Output events still allowed (0 when the request does not stream).
	streamBudget int64
	dropping     bool
	redact       redactStream
	// Once the call is answered with a handle: where its output goes.
	ring *ring
	// A program's output goes here instead, as it is read (never captured).
	forward func(data []byte)
	taken   chan struct{}
	once    sync.Once
}

func newStream(fd int, name string, request *protocol.Exec, redactor *Redactor) *stream {
	// Non-blocking before os.NewFile: the runtime's poller then watches it,
	// and a read deadline can interrupt a read.
	_ = syscall.SetNonblock(fd, true)
	s := &stream{
		file:    os.NewFile(uintptr(fd), name),
		name:    name,
		capture: newCapture(request.OutputCap, request.HeadFraction),
		taken:   make(chan struct{}),
		redact:  redactStream{r: redactor},
	}
	if request.Stream {
		s.streamBudget = request.StreamCap
	}
	return s
}

func (s *stream) start(a *Agent, call *Call) {
	go s.read(a, call)
}

func (s *stream) read(a *Agent, call *Call) {
	defer s.file.Close()
	defer s.once.Do(func() { close(s.taken) })
	pooled := getChunk()
	defer putChunk(pooled)
	buf := (*pooled)[:readChunk]
	for {
		n, err := s.file.Read(buf)
		if n > 0 {
			s.take(a, call, buf[:n])
		}
		if err == nil {
			continue
		}
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			s.end(a, call)
			return // end of file: every writer is gone
		}
		// Cut: take what is already in the pipe, then drop the rest.
		s.drainNow(a, call, buf)
		s.end(a, call)
		s.mu.Lock()
		s.dropping = true
		s.mu.Unlock()
		s.once.Do(func() { close(s.taken) })
		_ = s.file.SetReadDeadline(time.Time{})
	}
}

func (s *stream) drainNow(a *Agent, call *Call, buf []byte) {
	raw, err := s.file.SyscallConn()
	if err != nil {
		return
	}
	_ = raw.Control(func(fd uintptr) {
		for {
			n, err := syscall.Read(int(fd), buf)
			if n <= 0 || err != nil {
				return
			}
			s.take(a, call, buf[:n])
		}
	})
}

func (s *stream) take(a *Agent, call *Call, data []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dropping {
		return
	}
	select {
	case call.output <- struct{}{}:
	default:
	}
	// Secrets are redacted before anything is captured or streamed.
	s.keep(a, call, s.redact.feed(data))
}

// end takes what the redaction still holds: the output has ended, or is
// dropped from now on.
func (s *stream) end(a *Agent, call *Call) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.dropping {
		s.keep(a, call, s.redact.flush())
	}
}

// keep captures redacted output and streams it (under s.mu).
func (s *stream) keep(a *Agent, call *Call, data []byte) {
	if len(data) == 0 {
		return
	}
	if s.ring != nil {
		s.ring.add(data)
		return
	}
	if s.forward != nil {
		s.forward(data)
		return
	}
	s.capture.add(data)
	if s.streamBudget > 0 {
		chunk := data
		if int64(len(chunk)) > s.streamBudget {
			chunk = chunk[:s.streamBudget]
		}
		s.streamBudget -= int64(len(chunk))
		event := protocol.NewOutput()
		event.Stream = s.name
		a.sendEpoch(&event, call.id, call.epoch, chunk)
	}
}

// cut ends the capture once the main process has exited.
func (s *stream) cut() {
	_ = s.file.SetReadDeadline(time.Now())
	<-s.taken
}

// detach appends what was captured to `body` and sends what follows to
// the ring of the call's handle.
func (s *stream) detach(body *bytes.Buffer, to *ring) protocol.CaptureInfo {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ring = to
	return s.capture.finish(body)
}

// wait waits at most `within` for the stream's end.
func (s *stream) wait(within time.Duration) {
	timer := time.NewTimer(within)
	defer timer.Stop()
	select {
	case <-s.taken:
	case <-timer.C:
	}
}
