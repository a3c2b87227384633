package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"os"
	"testing"

	"toolrt/agent/protocol"
)

func tarOf(t testing.TB, members ...*tar.Header) []byte {
	var buf bytes.Buffer
	w := tar.NewWriter(&buf)
	for _, h := range members {
		if err := w.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Size > 0 {
			_, _ = w.Write(bytes.Repeat([]byte("x"), int(h.Size)))
		}
	}
	_ = w.Close()
	return buf.Bytes()
}

// extractInto unpacks data below a fresh directory; that directory's parent.
func extractInto(t *testing.T, data []byte) (string, error) {
	root := t.TempDir()
	request := protocol.NewExtract()
	request.Dest = root + "/dest"
	_, err := extract(&request, bytes.NewReader(data), newBudget(0.5))
	return root, err
}

// Whatever the archive, nothing lands outside the destination and no
// staging directory is left in it; a refusal leaves nothing at all.
func FuzzExtract(f *testing.F) {
	f.Add(tarOf(f, &tar.Header{Name: "a/b.txt", Size: 3, Mode: 0o644, Typeflag: tar.TypeReg}))
	f.Add(tarOf(f, &tar.Header{Name: "../up", Size: 1, Mode: 0o644, Typeflag: tar.TypeReg}))
	f.Add(tarOf(f, &tar.Header{Name: "l", Linkname: "../../etc", Typeflag: tar.TypeSymlink},
		&tar.Header{Name: "l/passwd", Size: 1, Typeflag: tar.TypeReg}))
	f.Add(tarOf(f, &tar.Header{Name: "f", Size: 2, Typeflag: tar.TypeReg},
		&tar.Header{Name: "h", Linkname: "f", Typeflag: tar.TypeLink}))
	var zipped bytes.Buffer
	gz := gzip.NewWriter(&zipped)
	_, _ = gz.Write(tarOf(f, &tar.Header{Name: "z", Size: 5, Typeflag: tar.TypeReg}))
	_ = gz.Close()
	f.Add(zipped.Bytes())
	// A small disk: a header may declare gigabytes (of a sparse file's holes).
	freeSpace = func(string) (int64, bool) { return 1 << 20, true }
	defer func() { freeSpace = freeBytes }()
	f.Fuzz(func(t *testing.T, data []byte) {
		root, err := extractInto(t, data)
		entries, _ := os.ReadDir(root)
		for _, entry := range entries {
			if entry.Name() != "dest" {
				t.Fatalf("%s left outside the destination", entry.Name())
			}
		}
		inside, _ := os.ReadDir(root + "/dest")
		for _, entry := range inside {
			if len(entry.Name()) > 16 && entry.Name()[:16] == ".toolrt-extract-" {
				t.Fatal("a staging directory was left")
			}
		}
		if err != nil && len(entries) != 0 {
			t.Fatalf("refused (%v) but left %d entries", err, len(entries))
		}
	})
}

func TestEscapesAreRefusedAndLeaveNothing(t *testing.T) {
	for name, data := range map[string][]byte{
		"dotdot":   tarOf(t, &tar.Header{Name: "a/../../x", Size: 1, Typeflag: tar.TypeReg}),
		"absolute": tarOf(t, &tar.Header{Name: "/x", Size: 1, Typeflag: tar.TypeReg}),
		"symlink":  tarOf(t, &tar.Header{Name: "l", Linkname: "/etc", Typeflag: tar.TypeSymlink}),
		"setuid":   tarOf(t, &tar.Header{Name: "s", Size: 1, Mode: 0o4755, Typeflag: tar.TypeReg}),
		"fifo":     tarOf(t, &tar.Header{Name: "p", Typeflag: tar.TypeFifo}),
		"hardlink": tarOf(t, &tar.Header{Name: "h", Linkname: "nothing", Typeflag: tar.TypeLink}),
	} {
		root, err := extractInto(t, data)
		if err == nil {
			t.Errorf("%s: taken", name)
		}
		if entries, _ := os.ReadDir(root); len(entries) != 0 {
			t.Errorf("%s: left %d entries", name, len(entries))
		}
	}
}
