// Package protocol is the static agent's side of runtime/agent/protocol.py:
// the frames and the typed messages they carry.
//
// The messages (messages_gen.go) are generated from protocol.py, the one
// definition; this file holds what the generator does not write: the frame
// (MAGIC, two big-endian u32 lengths, a JSON header, the raw body), the
// incremental decoder with its resync, and a JSON encoder that writes the
// very bytes Python's json.dumps(separators=(",", ":")) writes (fields in
// protocol.py's order, then op, id and epoch; ASCII only; floats as
// Python's repr). The golden frames in testdata/golden hold both sides to it.
package protocol

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// Magic starts every frame; a decoder that lost its place looks for it.
var Magic = []byte("TRT1")

// PrefixSize is MAGIC and the two lengths.
const PrefixSize = 12

// FrameError: the peer sent bytes that are not a frame, or a message of the
// wrong shape (protocol.FrameError).
type FrameError struct{ Reason string }

func (e *FrameError) Error() string { return e.Reason }

func frameError(format string, args ...any) error {
	return &FrameError{Reason: fmt.Sprintf(format, args...)}
}

// Message is any message with a wire name.
type Message interface {
	Op() string
	fieldEncoder
}

type fieldEncoder interface {
	encodeFields(e *encoder)
}

// New returns the message of `op` with its defaults (false for an unknown op).
func New(op string) (Message, bool) {
	make, ok := kinds[op]
	if !ok {
		return nil, false
	}
	return make(), true
}

// Encode is one frame: `message` answering (or being) request `id`.
func Encode(message Message, id, epoch int64, body []byte) ([]byte, error) {
	e := &encoder{}
	e.buf.WriteByte('{')
	message.encodeFields(e)
	e.str("op", message.Op())
	e.int("id", id)
	e.int("epoch", epoch)
	e.buf.WriteByte('}')
	header := e.buf.Bytes()
	if len(header) > MaxHeader || len(body) > MaxBody {
		return nil, frameError("frame too large: header %d bytes, body %d bytes", len(header), len(body))
	}
	out := make([]byte, PrefixSize, PrefixSize+len(header)+len(body))
	copy(out, Magic)
	binary.BigEndian.PutUint32(out[4:], uint32(len(header)))
	binary.BigEndian.PutUint32(out[8:], uint32(len(body)))
	out = append(out, header...)
	return append(out, body...), nil
}

// Frame is a decoded frame: its op, request id, epoch, header and body.
type Frame struct {
	Op     string
	ID     int64
	Epoch  int64
	Header []byte
	Body   []byte
	// The header's fields, decoded once by newFrame for Message.
	fields map[string]json.RawMessage
}

func newFrame(header, body []byte) (*Frame, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(header, &fields); err != nil || fields == nil {
		if !json.Valid(header) {
			return nil, frameError("frame header is not JSON")
		}
		return nil, frameError("frame header is not a JSON object")
	}
	f := &Frame{Header: header, Body: body, fields: fields}
	bad := frameError("frame header lacks a string op, an integer id or an integer epoch")
	if json.Unmarshal(fields["op"], &f.Op) != nil || !isString(fields["op"]) {
		return nil, bad
	}
	if json.Unmarshal(fields["id"], &f.ID) != nil || !isNumber(fields["id"]) {
		return nil, bad
	}
	if raw, ok := fields["epoch"]; ok && (json.Unmarshal(raw, &f.Epoch) != nil || !isNumber(raw)) {
		return nil, bad
	}
	return f, nil
}

func isString(raw json.RawMessage) bool { return len(raw) > 0 && raw[0] == '"' }
func isNumber(raw json.RawMessage) bool {
	return len(raw) > 0 && (raw[0] == '-' || (raw[0] >= '0' && raw[0] <= '9'))
}

// Message is the typed message of this frame (a FrameError for an unknown op).
func (f *Frame) Message() (Message, error) {
	m, ok := New(f.Op)
	if !ok {
		return nil, frameError("unknown op %q", clip(f.Op, 40))
	}
	// Every generated message decodes from the header's fields: the ones
	// newFrame decoded already (the header's second parse was a tenth of
	// the agent's CPU per command). Its UnmarshalJSON does the same from
	// the header's bytes.
	if d, ok := m.(fieldDecoder); ok && f.fields != nil {
		if err := d.decodeFields(f.fields); err != nil {
			return nil, asFrameError(err)
		}
		return m, nil
	}
	if err := json.Unmarshal(f.Header, m); err != nil {
		return nil, asFrameError(err)
	}
	return m, nil
}

// fieldDecoder: a message that takes its fields from a decoded object.
type fieldDecoder interface {
	decodeFields(raw map[string]json.RawMessage) error
}

func clip(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

func asFrameError(err error) error {
	var fe *FrameError
	if errors.As(err, &fe) {
		return fe
	}
	return frameError("%v", err)
}

// Decoder is the incremental frame decoder: feed bytes, get whole frames.
// Bytes before a frame's MAGIC are skipped (and counted in Skipped).
type Decoder struct {
	buf     []byte
	need    bool
	hlen    int
	blen    int
	Skipped int
}

// Resync forgets a partial frame (its writer is gone).
func (d *Decoder) Resync() {
	d.Skipped += len(d.buf)
	d.buf = d.buf[:0]
	d.need = false
}

// Feed takes bytes in and returns the frames they complete; an error is a
// protocol violation (the frames before it are returned too), after which
// the decoder has dropped the offending bytes: Feed(nil) goes on with what
// followed them.
func (d *Decoder) Feed(data []byte) ([]*Frame, error) {
	d.buf = append(d.buf, data...)
	var frames []*Frame
	for {
		if !d.need {
			if !d.findMagic() || len(d.buf) < PrefixSize {
				break
			}
			hlen := binary.BigEndian.Uint32(d.buf[4:])
			blen := binary.BigEndian.Uint32(d.buf[8:])
			if hlen > MaxHeader || blen > MaxBody {
				// Not a frame after all: look for the next MAGIC after it.
				d.buf = d.buf[len(Magic):]
				d.Skipped += len(Magic)
				return frames, frameError("frame too large: header %d bytes, body %d bytes", hlen, blen)
			}
			d.hlen, d.blen, d.need = int(hlen), int(blen), true
			d.buf = d.buf[PrefixSize:]
		}
		if len(d.buf) < d.hlen+d.blen {
			break
		}
		header := append([]byte(nil), d.buf[:d.hlen]...)
		body := append([]byte(nil), d.buf[d.hlen:d.hlen+d.blen]...)
		d.buf = d.buf[d.hlen+d.blen:]
		d.need = false
		frame, err := newFrame(header, body)
		if err != nil {
			return frames, err
		}
		frames = append(frames, frame)
	}
	// Give back what a large frame left behind.
	if len(d.buf) == 0 && cap(d.buf) > 1<<20 {
		d.buf = nil
	}
	return frames, nil
}

func (d *Decoder) findMagic() bool {
	at := bytes.Index(d.buf, Magic)
	if at < 0 {
		keep := len(Magic) - 1
		drop := len(d.buf) - keep
		if drop > 0 {
			d.Skipped += drop
			d.buf = d.buf[drop:]
		}
		return false
	}
	d.Skipped += at
	d.buf = d.buf[at:]
	return true
}

// -- decoding fields ------------------------------------------------------

func decodeObject(data []byte, name string, fields func(map[string]json.RawMessage) error) error {
	if len(data) == 0 || data[0] != '{' {
		return frameError("%s: expected an object", name)
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		return frameError("%s: %v", name, err)
	}
	return fields(raw)
}

// field decodes raw[name] into *into when present; null only where the
// field is Optional, and a value of another type is an error (from_dict).
func field[T any](raw map[string]json.RawMessage, name string, into *T, nullable bool, where string) error {
	value, ok := raw[name]
	if !ok {
		return nil
	}
	if string(value) == "null" {
		if !nullable {
			return frameError("%s: expected a value, got null", where)
		}
		var zero T
		*into = zero
		return nil
	}
	if err := json.Unmarshal(value, into); err != nil {
		var fe *FrameError
		if errors.As(err, &fe) {
			return fe
		}
		return frameError("%s: %v", where, err)
	}
	return nil
}

// -- encoding ---------------------------------------------------------------

type encoder struct {
	buf   bytes.Buffer
	inner bool
}

func (e *encoder) key(name string) {
	if e.inner {
		e.buf.WriteByte(',')
	}
	e.inner = true
	writeString(&e.buf, name)
	e.buf.WriteByte(':')
}

func (e *encoder) str(name, value string) {
	e.key(name)
	writeString(&e.buf, value)
}

func (e *encoder) int(name string, value int64) {
	e.key(name)
	e.buf.WriteString(strconv.FormatInt(value, 10))
}

func (e *encoder) float(name string, value float64) {
	e.key(name)
	e.buf.WriteString(pyFloat(value))
}

func (e *encoder) boolean(name string, value bool) {
	e.key(name)
	e.buf.WriteString(strconv.FormatBool(value))
}

func (e *encoder) optInt64(name string, value *int64) {
	if value == nil {
		e.key(name)
		e.buf.WriteString("null")
		return
	}
	e.int(name, *value)
}

func (e *encoder) strings(name string, values []string) {
	e.key(name)
	e.buf.WriteByte('[')
	for i, v := range values {
		if i > 0 {
			e.buf.WriteByte(',')
		}
		writeString(&e.buf, v)
	}
	e.buf.WriteByte(']')
}

// stringMap writes keys sorted (Python keeps insertion order: the golden
// frames use sorted keys); nil is null where the field is Optional.
func (e *encoder) stringMap(name string, values map[string]string, nullable bool) {
	e.key(name)
	if values == nil && nullable {
		e.buf.WriteString("null")
		return
	}
	keys := make([]string, 0, len(values))
	for k := range values {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	e.buf.WriteByte('{')
	for i, k := range keys {
		if i > 0 {
			e.buf.WriteByte(',')
		}
		writeString(&e.buf, k)
		e.buf.WriteByte(':')
		writeString(&e.buf, values[k])
	}
	e.buf.WriteByte('}')
}

func (e *encoder) message(name string, value fieldEncoder) {
	e.key(name)
	e.object(value)
}

// object writes a nested message as a JSON object of its own.
func (e *encoder) object(value fieldEncoder) {
	inner := &encoder{}
	inner.buf.WriteByte('{')
	value.encodeFields(inner)
	inner.buf.WriteByte('}')
	e.buf.Write(inner.buf.Bytes())
}

func optMessage[T any, P interface {
	*T
	fieldEncoder
}](e *encoder, name string, value *T) {
	if value == nil {
		e.key(name)
		e.buf.WriteString("null")
		return
	}
	e.message(name, P(value))
}

func messageList[T any, P interface {
	*T
	fieldEncoder
}](e *encoder, name string, values []T) {
	e.key(name)
	e.buf.WriteByte('[')
	for i := range values {
		if i > 0 {
			e.buf.WriteByte(',')
		}
		e.object(P(&values[i]))
	}
	e.buf.WriteByte(']')
}

// writeString writes `s` as json.dumps(ensure_ascii=True) does: every byte
// outside printable ASCII escaped, non-ASCII as \uXXXX (pairs beyond the
// BMP). A byte that is not UTF-8 (a file name's, from the sandbox) travels
// as Python's surrogateescape writes it, a lone surrogate U+DC80..U+DCFF,
// so the daemon knows the name was not UTF-8 rather than seeing U+FFFD.
func writeString(buf *bytes.Buffer, s string) {
	const hex = "0123456789abcdef"
	buf.WriteByte('"')
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			r = 0xdc00 + rune(s[i])
		}
		i += size
		switch {
		case r == '"':
			buf.WriteString(`\"`)
		case r == '\\':
			buf.WriteString(`\\`)
		case r == '\n':
			buf.WriteString(`\n`)
		case r == '\r':
			buf.WriteString(`\r`)
		case r == '\t':
			buf.WriteString(`\t`)
		case r == '\b':
			buf.WriteString(`\b`)
		case r == '\f':
			buf.WriteString(`\f`)
		case r >= 0x20 && r < 0x7f:
			buf.WriteByte(byte(r))
		default:
			units := []rune{r}
			if r > 0xffff {
				hi, lo := utf16.EncodeRune(r)
				units = []rune{hi, lo}
			}
			for _, u := range units {
				buf.WriteString(`\u`)
				buf.WriteByte(hex[u>>12&0xf])
				buf.WriteByte(hex[u>>8&0xf])
				buf.WriteByte(hex[u>>4&0xf])
				buf.WriteByte(hex[u&0xf])
			}
		}
	}
	buf.WriteByte('"')
}

// pyFloat is Python's repr of a float: the shortest digits, positional
// between 1e-4 and 1e16, with ".0" when integral; NaN and infinities as
// json.dumps writes them.
func pyFloat(f float64) string {
	switch {
	case math.IsNaN(f):
		return "NaN"
	case math.IsInf(f, 1):
		return "Infinity"
	case math.IsInf(f, -1):
		return "-Infinity"
	}
	sci := strconv.FormatFloat(f, 'e', -1, 64)
	exp, _ := strconv.Atoi(sci[bytes.IndexByte([]byte(sci), 'e')+1:])
	if f != 0 && (exp < -4 || exp >= 16) {
		return sci
	}
	text := strconv.FormatFloat(f, 'f', -1, 64)
	if !bytes.ContainsAny([]byte(text), ".") {
		text += ".0"
	}
	return text
}
