package main

// A session's secrets: every command's environment gets them, and every
// value (and its base64 forms) is replaced by [REDACTED:NAME] in what the
// agent answers. runtime/agent/redact.py's behaviour to the byte, held to
// golden cases written from it (testdata/redact.json, scripts/gen_agent_golden.py).
//
// Matching is plain byte search, leftmost first and, of the forms that
// start at one place, the longest (as the Python agent's alternation of
// escaped literals sorted longest first): no regular expression, so no
// question of how invalid UTF-8 in the output is read.

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync/atomic"
	"unicode/utf8"

	"toolrt/agent/protocol"
)

const (
	// Base64 cores shorter than this are not redacted: they would match ordinary text.
	minBase64 = 8
	// A piece of a secret this long, left at a cut, is redacted too.
	minFragment = 4
	maxNameLen  = 128
)

// How many leading characters of base64(k prefix bytes + value) depend on the prefix.
var leading = [3]int{0, 2, 3}

func mark(name string) []byte { return []byte("[REDACTED:" + name + "]") }

// base64Forms is the base64 text (standard and URL-safe) of value wherever
// it sits in a longer string: for each alignment, the characters that
// depend on the value's bytes alone.
func base64Forms(value []byte) []string {
	var forms []string
	for k := 0; k < 3; k++ {
		prefixed := append(make([]byte, k, k+len(value)), value...)
		encoded := base64.RawStdEncoding.EncodeToString(prefixed)
		end := len(encoded)
		if (k+len(value))%3 != 0 {
			end-- // a last character shared with the bytes that follow
		}
		if end-leading[k] < minBase64 {
			continue
		}
		core := encoded[leading[k]:end]
		for _, form := range []string{core, strings.NewReplacer("+", "-", "/", "_").Replace(core)} {
			if !contains(forms, form) {
				forms = append(forms, form)
			}
		}
	}
	return forms
}

func contains(list []string, s string) bool {
	for _, item := range list {
		if item == s {
			return true
		}
	}
	return false
}

func validName(name string) bool {
	if len(name) == 0 || len(name) > maxNameLen {
		return false
	}
	for i, c := range []byte(name) {
		letter := c == '_' || (c|0x20 >= 'a' && c|0x20 <= 'z')
		if !letter && (i == 0 || c < '0' || c > '9') {
			return false
		}
	}
	return true
}

// decodeSecrets is the body of a Secrets request.
func decodeSecrets(body []byte) (map[string]string, error) {
	if !utf8.Valid(body) {
		return nil, errors.New("secrets: the body is not UTF-8")
	}
	var raw map[string]any
	if err := json.Unmarshal(body, &raw); err != nil {
		var syntax *json.SyntaxError
		if errors.As(err, &syntax) {
			return nil, fmt.Errorf("secrets: %v", err)
		}
		raw = nil // valid JSON but no object: the message below
	}
	secrets := make(map[string]string, len(raw))
	for name, value := range raw {
		text, ok := value.(string)
		if !ok || text == "" || !validName(name) {
			raw = nil
			break
		}
		secrets[name] = text
	}
	if raw == nil {
		return nil, errors.New("secrets: expected an object of NAME to non-empty string values")
	}
	return secrets, nil
}

type secret struct{ name, value string }

// Redactor holds every form of every secret of a session.
type Redactor struct {
	secrets map[string]string
	owner   map[string]string // form → the name it is replaced with
	byName  []string          // forms in the order they were found (the fragment's tie-break)
	forms   []string          // longest first (the match's tie-break)
	values  []secret          // longest first, for references
	first   [256]bool
	longest int
}

func newRedactor(secrets map[string]string) *Redactor {
	r := &Redactor{secrets: secrets, owner: map[string]string{}}
	names := make([]string, 0, len(secrets))
	for name := range secrets {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		value := secrets[name]
		r.values = append(r.values, secret{name, value})
		for _, form := range append([]string{value}, base64Forms([]byte(value))...) {
			if _, seen := r.owner[form]; !seen {
				r.owner[form] = name
				r.byName = append(r.byName, form)
			}
		}
	}
	// Python sorts by the length of the text in characters, stably.
	sort.SliceStable(r.values, func(i, j int) bool {
		return utf8.RuneCountInString(r.values[i].value) > utf8.RuneCountInString(r.values[j].value)
	})
	r.forms = append([]string(nil), r.byName...)
	sort.SliceStable(r.forms, func(i, j int) bool { return len(r.forms[i]) > len(r.forms[j]) })
	for _, form := range r.forms {
		r.first[form[0]] = true
	}
	if len(r.forms) > 0 {
		r.longest = len(r.forms[0])
	}
	return r
}

func (r *Redactor) empty() bool { return len(r.forms) == 0 }

type match struct {
	start, end int
	form       string
}

// matches are the forms found in data, left to right, none overlapping.
func (r *Redactor) matches(data []byte, limit int) []match {
	if r.empty() {
		return nil
	}
	// at[i]: where forms[i] next occurs at or after pos (-1: nowhere).
	at := make([]int, len(r.forms))
	pos := 0
	search := func(i int) {
		at[i] = -1
		if n := bytes.Index(data[pos:], []byte(r.forms[i])); n >= 0 {
			at[i] = pos + n
		}
	}
	for i := range r.forms {
		search(i)
	}
	var found []match
	for len(found) < limit {
		best := -1
		for i, where := range at {
			if where >= 0 && (best < 0 || where < at[best]) {
				best = i
			}
		}
		if best < 0 {
			return found
		}
		m := match{at[best], at[best] + len(r.forms[best]), r.forms[best]}
		found = append(found, m)
		pos = m.end
		for i, where := range at {
			if where >= 0 && where < pos {
				search(i)
			}
		}
	}
	return found
}

func (r *Redactor) found(data []byte) bool { return len(r.matches(data, 1)) > 0 }

// redact is data with every form of every secret replaced; cutBefore /
// cutAfter say that a cut precedes / follows it, so the end of a secret it
// begins with / the start of one it ends with goes too.
func (r *Redactor) redact(data []byte, cutBefore, cutAfter bool) []byte {
	if r.empty() {
		return data
	}
	data = r.replace(data, r.matches(data, len(data)), len(data))
	if cutBefore {
		data = r.fragment(data, true)
	}
	if cutAfter {
		data = r.fragment(data, false)
	}
	return data
}

// replace is data[:upto] with the matches replaced by their marks.
func (r *Redactor) replace(data []byte, found []match, upto int) []byte {
	if len(found) == 0 {
		return data[:upto]
	}
	var out bytes.Buffer
	pos := 0
	for _, m := range found {
		out.Write(data[pos:m.start])
		out.Write(mark(r.owner[m.form]))
		pos = m.end
	}
	if upto > pos {
		out.Write(data[pos:upto])
	}
	return out.Bytes()
}

// fragment replaces the longest piece (minFragment bytes or more) of a form
// that data starts with (a suffix, atStart) or ends with (a prefix).
func (r *Redactor) fragment(data []byte, atStart bool) []byte {
	best, name := 0, ""
	for _, form := range r.byName {
		lowest := minFragment
		if best+1 > lowest {
			lowest = best + 1
		}
		for size := min(len(form)-1, len(data)); size >= lowest; size-- {
			var ok bool
			if atStart {
				ok = bytes.HasPrefix(data, []byte(form[len(form)-size:]))
			} else {
				ok = bytes.HasSuffix(data, []byte(form[:size]))
			}
			if ok {
				best, name = size, r.owner[form]
				break
			}
		}
	}
	switch {
	case best == 0:
		return data
	case atStart:
		return append(mark(name), data[best:]...)
	default:
		return append(append([]byte(nil), data[:len(data)-best]...), mark(name)...)
	}
}

// environment is a command's: the secrets, then env with each ${NAME} of a
// secret expanded (persisted exports keep references).
func (r *Redactor) environment(env map[string]string) map[string]string {
	merged := make(map[string]string, len(r.secrets)+len(env))
	for name, value := range r.secrets {
		merged[name] = value
	}
	for key, value := range env {
		merged[key] = r.expand(value)
	}
	return merged
}

func (r *Redactor) expand(value string) string {
	if len(r.secrets) == 0 || !strings.Contains(value, "${") {
		return value
	}
	var out strings.Builder
	for {
		i := strings.Index(value, "${")
		if i < 0 {
			break
		}
		out.WriteString(value[:i])
		if end := strings.IndexByte(value[i+2:], '}'); end >= 0 {
			if secret, ok := r.secrets[value[i+2:i+2+end]]; ok {
				out.WriteString(secret)
				value = value[i+3+end:]
				continue
			}
		}
		out.WriteString(value[i : i+1])
		value = value[i+1:]
	}
	out.WriteString(value)
	return out.String()
}

// references are a shell's exports as the daemon may keep them: the
// secrets' own variables left out, a value holding a secret with ${NAME}
// in its place, and one holding an encoded form not kept (with a note).
func (r *Redactor) references(env map[string]string) (map[string]string, []string) {
	kept := map[string]string{}
	var refused []string
	for key, value := range env {
		if own, ok := r.secrets[key]; ok && own == value {
			continue
		}
		for _, s := range r.values {
			value = strings.ReplaceAll(value, s.value, "${"+s.name+"}")
		}
		if r.found([]byte(value)) {
			refused = append(refused, key)
			continue
		}
		kept[key] = value
	}
	var notes []string
	if len(refused) > 0 {
		sort.Strings(refused)
		notes = append(notes, fmt.Sprintf("not kept for later calls: %s (the value holds "+
			"an encoded secret; compute it again in each command)", strings.Join(refused, ", ")))
	}
	return kept, notes
}

// redactStream redacts a stream that arrives in pieces: bytes at the end of
// a piece that could begin a form wait for the next piece, so a secret
// split across two is still caught; output that could not begin one is
// never held back.
type redactStream struct {
	r    *Redactor
	held []byte
}

func (s *redactStream) feed(data []byte) []byte {
	if s.r.empty() {
		return data
	}
	buf := append(s.held, data...)
	hold := s.unfinished(buf)
	// A form that starts at or after `hold` might grow into a longer one.
	var found []match
	for _, m := range s.r.matches(buf, len(buf)) {
		if m.start >= hold {
			break
		}
		found = append(found, m)
	}
	upto := hold
	if n := len(found); n > 0 && found[n-1].end > upto {
		upto = found[n-1].end
	}
	out := s.r.replace(buf, found, upto)
	s.held = append([]byte(nil), buf[upto:]...)
	return out
}

// unfinished is where the first tail of buf that is a proper prefix of a form starts.
func (s *redactStream) unfinished(buf []byte) int {
	for start := max(0, len(buf)-s.r.longest+1); start < len(buf); start++ {
		if !s.r.first[buf[start]] {
			continue
		}
		tail := buf[start:]
		for _, form := range s.r.forms {
			if len(form) > len(tail) && strings.HasPrefix(form, string(tail)) {
				return start
			}
		}
	}
	return len(buf)
}

// flush is what is held back, redacted: the stream has ended.
func (s *redactStream) flush() []byte {
	data := s.held
	s.held = nil
	return s.r.redact(data, false, false)
}

func max(a, b int) int {
	if a > b {
		return a
	}
	return b
}

// The session's redactor (replaced once, by the Secrets request).
var noSecrets = newRedactor(nil)

type redactorSlot struct{ p atomic.Pointer[Redactor] }

func (s *redactorSlot) get() *Redactor {
	if r := s.p.Load(); r != nil {
		return r
	}
	return noSecrets
}

func init() {
	handle("secrets", func(a *Agent, frame *protocol.Frame, _ protocol.Message) {
		secrets, err := decodeSecrets(frame.Body)
		if err != nil {
			a.fail(frame.ID, protocol.InvalidArguments, err.Error())
			return
		}
		a.redactor.p.Store(newRedactor(secrets))
		done := protocol.NewDone()
		a.send(&done, frame.ID, nil)
	})
}
