package protocol

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// decodeOne is the only frame of `data`, typed.
func decodeOne(data []byte) (*Frame, Message, error) {
	var d Decoder
	frames, err := d.Feed(data)
	if err != nil {
		return nil, nil, err
	}
	if len(frames) != 1 {
		return nil, nil, frameError("%d frames", len(frames))
	}
	m, err := frames[0].Message()
	return frames[0], m, err
}

// The golden frames (scripts/gen_agent_golden.py, written by the Python
// codec): NAME.frame decodes and encodes back to the same bytes, NAME.in
// decodes to what NAME.frame holds, bad-*.in is refused.
func TestGoldenFrames(t *testing.T) {
	paths, _ := filepath.Glob("testdata/golden/*")
	if len(paths) < 50 {
		t.Fatalf("only %d golden files", len(paths))
	}
	ops := map[string]bool{}
	for _, path := range paths {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		name := filepath.Base(path)
		stem := strings.TrimSuffix(strings.TrimSuffix(name, ".in"), ".frame")
		frame, m, err := decodeOne(data)
		if strings.HasPrefix(name, "bad-") {
			if err == nil {
				t.Errorf("%s: decoded, should be refused", name)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		ops[frame.Op] = true
		again, err := Encode(m, frame.ID, frame.Epoch, frame.Body)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		want := data
		if strings.HasSuffix(name, ".in") {
			want, _ = os.ReadFile(filepath.Join("testdata/golden", stem+".frame"))
		}
		if !bytes.Equal(again, want) {
			t.Errorf("%s: Go encodes\n%s\nPython encoded\n%s", name, again[PrefixSize:], want[PrefixSize:])
		}
	}
	for _, group := range [][]string{Requests, Replies, Events} {
		for _, op := range group {
			if !ops[op] {
				t.Errorf("no golden frame of %q", op)
			}
		}
	}
}

// Message decodes from the fields newFrame decoded; a message's own
// UnmarshalJSON of the header must agree with it on every golden frame,
// refused ones included (and on every fuzzed one, FuzzDecoder).
func TestMessageFromFieldsAgreesWithUnmarshal(t *testing.T) {
	paths, _ := filepath.Glob("testdata/golden/*")
	for _, path := range paths {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var d Decoder
		frames, err := d.Feed(data)
		if err != nil || len(frames) != 1 {
			continue // refused before any message is decoded
		}
		checkSameAsUnmarshal(t, filepath.Base(path), frames[0])
	}
}

// checkSameAsUnmarshal: the frame's Message is what decoding its header
// with json.Unmarshal makes, or fails the same way.
func checkSameAsUnmarshal(t *testing.T, name string, frame *Frame) {
	t.Helper()
	fast, fastErr := frame.Message()
	slow, slowErr := (&Frame{Op: frame.Op, Header: frame.Header}).Message()
	if (fastErr == nil) != (slowErr == nil) || (fastErr != nil && fastErr.Error() != slowErr.Error()) {
		t.Fatalf("%s: errors differ: %v / %v", name, fastErr, slowErr)
	}
	if fastErr != nil {
		return
	}
	a, _ := Encode(fast, 1, 1, nil)
	b, _ := Encode(slow, 1, 1, nil)
	if !bytes.Equal(a, b) {
		t.Fatalf("%s: decodes differently:\n%s\n%s", name, a, b)
	}
}
