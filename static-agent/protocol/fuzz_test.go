package protocol

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// FuzzDecoder: whatever bytes arrive (split anywhere), the decoder never
// panics nor holds more than a frame's worth, and every message it accepts
// encodes to a frame that decodes to the same bytes again.
func FuzzDecoder(f *testing.F) {
	paths, _ := filepath.Glob("testdata/golden/*")
	for _, path := range paths {
		data, err := os.ReadFile(path)
		if err == nil {
			f.Add(data, uint16(len(data)/2))
		}
	}
	f.Fuzz(func(t *testing.T, data []byte, split uint16) {
		cut := int(split) % (len(data) + 1)
		var d Decoder
		first, err := d.Feed(data[:cut])
		if err != nil {
			return
		}
		rest, err := d.Feed(data[cut:])
		if err != nil {
			return
		}
		if len(d.buf) > PrefixSize+MaxHeader+MaxBody {
			t.Fatalf("decoder holds %d bytes", len(d.buf))
		}
		for _, frame := range append(first, rest...) {
			checkSameAsUnmarshal(t, frame.Op, frame)
			m, err := frame.Message()
			if err != nil {
				continue
			}
			once, err := Encode(m, frame.ID, frame.Epoch, frame.Body)
			if err != nil {
				continue // too large once escaped: the agent answers a Failure
			}
			_, again, err := decodeOne(once)
			if err != nil {
				t.Fatalf("%s: its own encoding does not decode: %v", frame.Op, err)
			}
			twice, _ := Encode(again, frame.ID, frame.Epoch, frame.Body)
			if !bytes.Equal(once, twice) {
				t.Fatalf("%s: encodes differently after a round trip:\n%s\n%s", frame.Op, once, twice)
			}
		}
	})
}
