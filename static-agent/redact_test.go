package main

import (
	"encoding/hex"
	"encoding/json"
	"os"
	"reflect"
	"testing"
)

// The cases runtime/agent/redact.py answered (scripts/gen_agent_redact.py):
// the Go redactor must answer the same bytes.
type redactCases struct {
	Sets []struct {
		Secrets     map[string]string
		Forms       map[string][]string
		Redact      [][]any
		Stream      [][]any
		Environment []map[string]string
		References  []any
	}
	Bodies [][]any
}

func loadRedactCases(t *testing.T) redactCases {
	data, err := os.ReadFile("testdata/redact.json")
	if err != nil {
		t.Fatal(err)
	}
	var cases redactCases
	if err := json.Unmarshal(data, &cases); err != nil {
		t.Fatal(err)
	}
	if len(cases.Sets) == 0 {
		t.Fatal("no cases")
	}
	return cases
}

func unhex(t *testing.T, v any) []byte {
	data, err := hex.DecodeString(v.(string))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func TestRedactionIsThePythonAgents(t *testing.T) {
	for _, set := range loadRedactCases(t).Sets {
		r := newRedactor(set.Secrets)
		for value, want := range set.Forms {
			if got := base64Forms([]byte(value)); !reflect.DeepEqual(got, want) && len(got)+len(want) > 0 {
				t.Errorf("forms of %q: got %q, want %q", value, got, want)
			}
		}
		for _, c := range set.Redact {
			data := unhex(t, c[0])
			got := r.redact(data, c[1].(bool), c[2].(bool))
			if want := unhex(t, c[3]); string(got) != string(want) {
				t.Errorf("%v redact(%q, before=%v, after=%v):\n got %q\nwant %q",
					set.Secrets, data, c[1], c[2], got, want)
			}
		}
		for _, c := range set.Stream {
			s := redactStream{r: r}
			pieces, outs := c[0].([]any), c[1].([]any)
			for i, piece := range pieces {
				got := s.feed(unhex(t, piece))
				if want := unhex(t, outs[i]); string(got) != string(want) {
					t.Errorf("%v piece %d of %q: got %q, want %q", set.Secrets, i, pieces, got, want)
				}
			}
			if got, want := s.flush(), unhex(t, c[2]); string(got) != string(want) {
				t.Errorf("%v flush of %q: got %q, want %q", set.Secrets, pieces, got, want)
			}
		}
		env, want := set.Environment[0], set.Environment[1]
		if got := r.environment(env); !reflect.DeepEqual(got, want) {
			t.Errorf("environment(%q):\n got %q\nwant %q", env, got, want)
		}
		exports := map[string]string{}
		for k, v := range set.References[0].(map[string]any) {
			exports[k] = v.(string)
		}
		kept, notes := r.references(exports)
		wantKept := map[string]string{}
		for k, v := range set.References[1].(map[string]any) {
			wantKept[k] = v.(string)
		}
		var wantNotes []string
		for _, note := range set.References[2].([]any) {
			wantNotes = append(wantNotes, note.(string))
		}
		if !reflect.DeepEqual(kept, wantKept) || !reflect.DeepEqual(notes, wantNotes) {
			t.Errorf("references(%q):\n got %q %q\nwant %q %q", exports, kept, notes, wantKept, wantNotes)
		}
	}
}

func TestSecretsBodiesAreThePythonAgents(t *testing.T) {
	for _, c := range loadRedactCases(t).Bodies {
		got, err := decodeSecrets([]byte(c[0].(string)))
		if c[1] == nil {
			if err == nil {
				t.Errorf("%s: taken as %q", c[0], got)
			}
			continue
		}
		want := map[string]string{}
		for k, v := range c[1].(map[string]any) {
			want[k] = v.(string)
		}
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("%s: got %q (%v), want %q", c[0], got, err, want)
		}
	}
	if _, err := decodeSecrets([]byte(`{"A": "v`)); err == nil {
		t.Error("a cut body taken")
	}
}
