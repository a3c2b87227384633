package main

import (
	"reflect"
	"testing"
)

// What BusyBox's sh printed for `export A="x y"; export B="it's<newline>two";
// export C` (C has no value), relayed as the POSIX report does.
const busyboxExports = "export A='x y'\n" +
	"export B='it'\"'\"'s\ntwo'\n" +
	"export C\n" +
	"export D=\"a\\\"b\\\\c\"\n" +
	"export PWD='/workspace'\n"

func TestAPosixShellsExportsAreKept(t *testing.T) {
	report := "toolrt-state-1\x00/workspace/sub\n\x00ENV-P\x00" + busyboxExports + "\x00ENV-END\x00END\x00"
	got, note, err := parseReport([]byte(report), true)
	if err != nil || note != "" {
		t.Fatalf("parseReport: %v %q", err, note)
	}
	want := map[string]string{"A": "x y", "B": "it's\ntwo", "D": `a"b\c`}
	if got.Cwd != "/workspace/sub" || !reflect.DeepEqual(got.Env, want) {
		t.Fatalf("got cwd %q env %q, want %q", got.Cwd, got.Env, want)
	}
}

func TestABrokenExportListingKeepsNothing(t *testing.T) {
	for _, listing := range []string{
		"export A='unterminated\n",
		"declare -x A='bash'\n",
		"export ='x'\n",
		"export A=\"open\n",
	} {
		report := "toolrt-state-1\x00/w\n\x00ENV-P\x00" + listing + "\x00ENV-END\x00END\x00"
		if got, _, err := parseReport([]byte(report), true); err == nil {
			t.Errorf("%q: kept %v, want an error", listing, got)
		}
	}
	// Two items in the section: not what the wrapper prints.
	two := "toolrt-state-1\x00/w\n\x00ENV-P\x00export A='1'\n\x00export B='2'\n\x00ENV-END\x00END\x00"
	if _, _, err := parseReport([]byte(two), true); err == nil {
		t.Error("two listings were taken")
	}
}

// Whatever a shell (or a process pretending to be one) prints, parsing it
// ends with entries or an error, never a panic.
func FuzzExportListing(f *testing.F) {
	f.Add(busyboxExports)
	f.Add("export A='")
	f.Add("export A=\"\\")
	f.Add("export A=\\")
	f.Fuzz(func(t *testing.T, listing string) {
		entries, err := exportEntries(listing)
		if err == nil {
			for _, entry := range entries {
				if len(entry) == 0 || entry[0] == '=' {
					t.Fatalf("an entry without a name: %q", entry)
				}
			}
		}
	})
}
