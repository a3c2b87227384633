package main

import (
	"bytes"
	"testing"
)

// The Python agent's ring checks (tests/unit/test_shell_state.py).
func TestRingKeepsTheNewestBytesAndCountsWhatFellOff(t *testing.T) {
	r := newRing(10)
	r.add([]byte("0123456789"))
	if data, dropped := r.read(false); string(data) != "0123456789" || dropped != 0 {
		t.Fatalf("%q %d", data, dropped)
	}
	r.add(bytes.Repeat([]byte("abcdefghijklmnopqrstuvwxyz"), 4000))
	if data, dropped := r.read(false); string(data) != "qrstuvwxyz" || dropped != 26*4000-10 {
		t.Fatalf("%q %d", data, dropped)
	}
	if data, dropped := r.read(false); len(data) != 0 || dropped != 0 {
		t.Fatalf("%q %d", data, dropped)
	}
	if len(r.buf) > 10+readChunk {
		t.Fatal(len(r.buf))
	}
}

func TestRingReadsNeverCutAUTF8Character(t *testing.T) {
	euro := []byte("€")
	r := newRing(100)
	r.add(append([]byte("price "), euro[:2]...))
	if data, _ := r.read(true); string(data) != "price " || r.unread() != 2 {
		t.Fatalf("%q, %d unread", data, r.unread())
	}
	r.add(append(euro[2:], '!'))
	if data, _ := r.read(true); string(data) != "€!" {
		t.Fatalf("%q", data)
	}
	for _, c := range []struct {
		data string
		want int
	}{{"a", 0}, {"€", 0}, {"€"[:1], 1}, {"😀"[:3], 3}} {
		if got := partialUTF8Tail([]byte(c.data)); got != c.want {
			t.Errorf("%q: %d, want %d", c.data, got, c.want)
		}
	}
}
