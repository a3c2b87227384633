package protocol

import (
	"bytes"
	"testing"
)

// A name that is not UTF-8 reaches the daemon as Python's surrogateescape
// would send it, so the daemon can say the name was replaced; a real U+FFFD
// stays one.
func TestBytesThatAreNotUTF8TravelAsLoneSurrogates(t *testing.T) {
	var buf bytes.Buffer
	writeString(&buf, "bad\xff\xc3(\ufffd\u00e9")
	want := `"bad\udcff\udcc3(\ufffd\u00e9"`
	if buf.String() != want {
		t.Fatalf("got %s, want %s", buf.String(), want)
	}
}
