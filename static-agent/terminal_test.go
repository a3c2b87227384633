package main

import (
	"syscall"
	"testing"
	"unsafe"
)

// A terminal opened without cgo is one: its size as asked and resized, and
// what is typed on its master side reaches its slave side.
func TestOpenTerminalSizesAndCarriesInput(t *testing.T) {
	master, slave, err := openTerminal(24, 80)
	if err != nil {
		t.Skipf("no pseudo-terminals here: %v", err)
	}
	defer syscall.Close(master)
	defer syscall.Close(slave)
	size := func() [4]uint16 {
		var got [4]uint16
		if err := ioctl(slave, syscall.TIOCGWINSZ, unsafe.Pointer(&got)); err != nil {
			t.Fatal(err)
		}
		return got
	}
	if got := size(); got[0] != 24 || got[1] != 80 {
		t.Fatalf("size %v, want 24x80", got)
	}
	keys, err := newKeyboard(master)
	if err != nil {
		t.Fatal(err)
	}
	keys.resize(40, 132)
	if got := size(); got[0] != 40 || got[1] != 132 {
		t.Fatalf("size %v after resize, want 40x132", got)
	}
	if n, open, err := keys.typeIn([]byte("hi\n")); n != 3 || !open || err != nil {
		t.Fatalf("typed %d, open %v, %v", n, open, err)
	}
	line := make([]byte, 16)
	n, err := syscall.Read(slave, line)
	if err != nil || string(line[:n]) != "hi\n" {
		t.Fatalf("slave read %q, %v", line[:n], err)
	}
	keys.close()
	if _, open, _ := keys.typeIn([]byte("x")); open {
		t.Fatal("a closed keyboard still types")
	}
}
