package main

// The spare shell's preamble (spare.go) turns the environment it started
// with into the call's, byte for byte, as bash's own start would have: run
// by a real bash, for environments made up at random (as
// tests/unit/test_spare_preamble.py does for the Python agent).

import (
	"bytes"
	"math/rand"
	"os/exec"
	"reflect"
	"strings"
	"testing"
)

const testPath = "/usr/bin:/bin"

// environmentAfter is the exported environment of a bash started with
// `had` once it ran `preamble`.
func environmentAfter(t *testing.T, had map[string]string, preamble string) map[string]string {
	t.Helper()
	cmd := exec.Command("/bin/bash", "-c", preamble+"/usr/bin/env -0")
	cmd.Env = []string{"PATH=" + testPath}
	for name, value := range had {
		cmd.Env = append(cmd.Env, name+"="+value)
	}
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("bash -c %q: %v", preamble, err)
	}
	env := map[string]string{}
	for _, item := range bytes.Split(out, []byte{0}) {
		name, value, ok := bytes.Cut(item, []byte("="))
		if ok && !shellOwnVars[string(name)] {
			env[string(name)] = string(value)
		}
	}
	return env
}

var (
	nameFirst = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz_"
	nameRest  = nameFirst + "0123456789"
	// Characters a value is made of: controls, quotes, backslashes,
	// newlines, DEL and non-ASCII among them (never NUL).
	awkward = []rune("\x01\t\n\r\x1b\x7f'\"\\$`!{}* ~éß€✓\u2fff")
)

func randomName(r *rand.Rand) string {
	for {
		var b strings.Builder
		b.WriteByte(nameFirst[r.Intn(len(nameFirst))])
		for i := r.Intn(9); i > 0; i-- {
			b.WriteByte(nameRest[r.Intn(len(nameRest))])
		}
		if name := b.String(); plainVar(name) && name != "PATH" {
			return name
		}
	}
}

func randomValue(r *rand.Rand) string {
	var b strings.Builder
	for i := r.Intn(41); i > 0; i-- {
		switch r.Intn(4) {
		case 0:
			b.WriteRune(awkward[r.Intn(len(awkward))])
		case 1:
			b.WriteByte(byte(0x80 + r.Intn(0x80))) // a byte that is not UTF-8 alone
		default:
			b.WriteRune(rune(' ' + r.Intn(0x5f)))
		}
	}
	return b.String()
}

func randomEnv(r *rand.Rand) map[string]string {
	env := map[string]string{}
	for i := r.Intn(7); i > 0; i-- {
		env[randomName(r)] = randomValue(r)
	}
	return env
}

func TestThePreambleGivesTheCallItsEnvironmentExactly(t *testing.T) {
	r := rand.New(rand.NewSource(24))
	for i := 0; i < 60; i++ {
		had, wanted := randomEnv(r), randomEnv(r)
		if i%3 == 0 { // some variables the same in both
			for name, value := range had {
				wanted[name] = value
				break
			}
		}
		preamble, ok := envPreamble(had, wanted)
		if !ok {
			t.Fatalf("no preamble from %q to %q", had, wanted)
		}
		if strings.Contains(preamble, "\n") {
			t.Fatalf("a preamble over lines would shift the command's line numbers: %q", preamble)
		}
		want := map[string]string{"PATH": testPath}
		for name, value := range wanted {
			want[name] = value
		}
		if got := environmentAfter(t, had, preamble); !reflect.DeepEqual(got, want) {
			t.Fatalf("from %q by %q: got %q, want %q", had, preamble, got, want)
		}
	}
}

func TestAVariableBashReadsAtStartUpMeansAShellOfItsOwn(t *testing.T) {
	for _, name := range []string{"BASH_ENV", "SHELLOPTS", "BASH_FUNC_ls%%", "ENV", "PS4", "A-B", "UID"} {
		if _, ok := envPreamble(map[string]string{}, map[string]string{name: "x"}); ok {
			t.Errorf("set %s by a preamble", name)
		}
		if _, ok := envPreamble(map[string]string{name: "x"}, map[string]string{}); ok {
			t.Errorf("unset %s by a preamble", name)
		}
	}
	// The same value in both needs no preamble, and refuses nothing.
	same := map[string]string{"SHELLOPTS": "x"}
	if preamble, ok := envPreamble(same, same); !ok || preamble != "" {
		t.Errorf("an unchanged SHELLOPTS: %q, %v", preamble, ok)
	}
}

func TestExportedFunctionsNeverMeetASpare(t *testing.T) {
	if !exportsFunctions(map[string]string{"BASH_FUNC_exec%%": "() { :; }"}) {
		t.Fatal("an exported function was not seen")
	}
	plan := &sparePlan{cwd: "/", env: map[string]string{"BASH_FUNC_eval%%": "() { :; }"}}
	if sp := (&Runner{}).startSpare(plan, nil); sp != nil {
		t.Fatal("a spare started with an exported function in its environment")
	}
	sp := &spare{env: map[string]string{}}
	if _, ok := scriptFor(sp, map[string]string{"BASH_FUNC_eval%%": "() { :; }"}, "true", false, true); ok {
		t.Fatal("a call exporting a function ran in a spare")
	}
	if _, ok := scriptFor(sp, map[string]string{}, "echo a\x00b", false, true); ok {
		t.Fatal("a command with a NUL ran in a spare")
	}
}

func TestAnsiQuoteIsOneWordOnOneLine(t *testing.T) {
	for value, want := range map[string]string{
		"":           `$''`,
		"it's":       `$'it\'s'`,
		`a\b`:        `$'a\\b'`,
		"two\nlines": `$'two\x0alines'`,
		"\x7f\x01é":  `$'\x7f\x01é'`,
	} {
		if got := ansiQuote(value); got != want {
			t.Errorf("ansiQuote(%q) = %s, want %s", value, got, want)
		}
	}
}
