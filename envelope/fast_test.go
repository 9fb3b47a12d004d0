package envelope

import (
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/relaystation/relay/internal/testenv"
)

// goldenEnvelopes returns the golden envelopes of this package and of every
// mapper (real webhooks mapped), by file name.
func goldenEnvelopes(t testing.TB) map[string][]byte {
	t.Helper()
	out := make(map[string][]byte)
	own, _ := filepath.Glob("testdata/valid/*.json")
	for _, p := range own {
		b := testenv.ReadFile(t, p)
		out[p] = b
	}
	mapped, _ := filepath.Glob("../mappers/*/testdata/golden/*.json")
	for _, p := range mapped {
		b := testenv.ReadFile(t, p)
		var g struct {
			Envelope json.RawMessage `json:"envelope"`
		}
		if json.Unmarshal(b, &g) == nil && len(g.Envelope) > 0 {
			out[p] = g.Envelope
		}
	}
	if len(out) < 20 {
		t.Fatalf("got %d golden envelopes, want the package's and the mappers' (at least 20)", len(out))
	}
	return out
}

// hostile are envelopes built to trip a fast validator: each differs from a
// valid one in one way the JSON Schema, the key-case check or encoding/json
// cares about (or, for some, looks as if it should but does not).
func hostile() []string {
	const (
		id  = `"id":"3b241101-e2bb-4255-8caf-4136c566a962"`
		ts  = `"timestamp":"2026-01-01T00:00:00Z"`
		req = id + `,` + ts + `,"channel":"slack","role":"user","content":"x"`
	)
	docs := []string{
		`{` + req + `}`,
		`{` + req + `}  ` + "\n", `{` + req + `} x`, `{` + req + `}{}`, "\ufeff{" + req + `}`, ` [` + `{` + req + `}]`, `null`, ``,
		// duplicates: encoding/json merges objects and keeps the last scalar
		`{` + req + `,` + id + `}`, `{` + req + `,"content":"y"}`,
		`{` + req + `,"context":{"system":"a"},"context":{"task":"b"}}`,
		`{` + req + `,"meta":{"thread":"a","thread":"b"}}`, `{` + req + `,"meta":{"source":{"url":"a"},"source":{"actor":"b"}}}`,
		`{` + req + `,"meta":{"facts":1,"facts":{"a":2}}}`, `{` + req + `,"meta":{"x":{"a":1,"a":2}}}`,
		`{` + req + `,"tool_call":{"name":"a","name":""}}`, `{` + req + `,"tool_call":{"name":"a","args":{"k":1,"k":2}}}`,
		// unknown and case-folded keys
		`{` + req + `,"extra":[1,{"a":null}],"ID":"x"}`, `{` + req + `,"Channel":"github"}`, `{` + req + `,"cOntext":{}}`,
		`{` + req + `,"meta":{"Thread":"x"}}`, `{` + req + `,"meta":{"tas\u212a_id":"x"}}`, `{` + req + `,"meta":{"taſk_id":"x"}}`,
		`{` + req + `,"meta":{"source":{"URL":"x"}}}`, `{` + req + `,"meta":{"budget":{"Tokens":3}}}`, `{` + req + `,"tool_call":{"Name":"x","name":"y"}}`,
		`{` + req + `,"context":{"System":"x"}}`, `{` + req + `,"memory_update":{"kind":"episodic","data":{},"TTL":1}}`,
		`{` + req + `,"\u0063ontext":{"s\u0079stem":"x"}}`, `{"\u0069d":"3b241101-e2bb-4255-8caf-4136c566a962",` + ts + `,"channel":"slack","role":"user","content":"x"}`,
		`{` + req + `,"ünknown":1}`, `{` + req + `,"meta":{"ñ":1}}`,
		// wrong types and null against absent
		`{` + req + `,"context":null}`, `{` + req + `,"context":{"task":null}}`, `{` + req + `,"context":{"task":1}}`,
		`{` + req + `,"tool_call":null}`, `{` + req + `,"tool_call":{"name":"a","result":null}}`, `{` + req + `,"tool_call":{"name":"a","args":null}}`,
		`{` + req + `,"tool_call":{"name":"a","id":null}}`, `{` + req + `,"tool_call":{"name":"a","id":7}}`, `{` + req + `,"tool_call":{"name":""}}`,
		`{` + req + `,"tool_call":{"name":"a","args":[]}}`, `{` + req + `,"tool_call":{}}`, `{` + req + `,"tool_call":[]}`,
		`{` + req + `,"memory_update":null}`, `{` + req + `,"memory_update":{"kind":"episodic"}}`, `{` + req + `,"memory_update":{"kind":"episodic","data":null}}`,
		`{` + req + `,"memory_update":{"kind":"semantic","data":{}}}`, `{` + req + `,"retrieval_refs":null}`, `{` + req + `,"retrieval_refs":[]}`,
		`{` + req + `,"retrieval_refs":["a",1]}`, `{` + req + `,"meta":null}`, `{` + req + `,"meta":{"thread":null}}`, `{` + req + `,"meta":{"budget":null}}`,
		`{` + req + `,"meta":{"budget":{"tokens":null}}}`, `{` + req + `,"meta":{"budget":{"tokens":"3"}}}`, `{` + req + `,"meta":{"budget":{"other":"x","tokens":-3}}}`,
		`{` + req + `,"meta":{"source":null}}`, `{` + req + `,"meta":{"source":{"actor":null}}}`, `{` + req + `,"meta":{"mcp_version":"1.0"}}`,
		`{` + req + `,"meta":{"mcp_version":"1.0.0\n"}}`, `{` + req + `,"meta":{"mcp_version":"01.2.3"}}`,
		`{"id":null,` + ts + `,"channel":"slack","role":"user","content":"x"}`, `{` + id + `,` + ts + `,"channel":"slack","role":"user","content":null}`,
		`{` + id + `,` + ts + `,"channel":"Slack","role":"user","content":"x"}`, `{` + id + `,` + ts + `,"channel":"slack","role":"user"}`,
		`{"id":"3B241101-E2BB-4255-AcAF-4136C566A962",` + ts + `,"channel":"slack","role":"user","content":"x"}`,
		`{"id":"3b241101-e2bb-4255-caf0-4136c566a962",` + ts + `,"channel":"slack","role":"user","content":"x"}`,
		// numbers
		`{` + req + `,"memory_update":{"kind":"episodic","data":{},"ttl":1e400}}`, `{` + req + `,"memory_update":{"kind":"episodic","data":{},"ttl":99999999999999999999}}`,
		`{` + req + `,"memory_update":{"kind":"episodic","data":{},"ttl":1.0}}`, `{` + req + `,"memory_update":{"kind":"episodic","data":{},"ttl":-0}}`,
		`{` + req + `,"memory_update":{"kind":"episodic","data":{},"ttl":-1}}`, `{` + req + `,"memory_update":{"kind":"episodic","data":{},"ttl":1e2}}`,
		`{` + req + `,"meta":{"budget":{"tokens":1e3}}}`, `{` + req + `,"meta":{"budget":{"tokens":9223372036854775808}}}`,
		`{` + req + `,"meta":{"n":1e400}}`, `{` + req + `,"meta":{"n":1e-400}}`, `{` + req + `,"meta":{"n":-0.0e+0}}`, `{` + req + `,"meta":{"n":01}}`,
		`{` + req + `,"meta":{"n":1.}}`, `{` + req + `,"meta":{"n":.5}}`, `{` + req + `,"meta":{"n":+1}}`, `{` + req + `,"meta":{"n":[1,2,]}}`,
		`{` + req + `,"tool_call":{"name":"a","args":{"n":123456789012345678901234567890}}}`,
		// strings: UTF-8, escapes, surrogates, control characters
		`{` + id + `,` + ts + `,"channel":"slack","role":"user","content":"caf\xc3\xa9 \xff"}`,
		`{` + id + `,` + ts + `,"channel":"slack","role":"user","content":"\ud83d\ude00 \u00e9\n\t\"\\\/\b\f\r"}`,
		`{` + id + `,` + ts + `,"channel":"slack","role":"user","content":"\ud83d"}`,
		`{` + id + `,` + ts + `,"channel":"slack","role":"user","content":"\ude00\ud83d"}`,
		`{` + id + `,` + ts + `,"channel":"slack","role":"user","content":"\ud83d\u0041"}`,
		`{` + id + `,` + ts + `,"channel":"slack","role":"user","content":"a` + "\x01" + `"}`,
		`{` + id + `,` + ts + `,"channel":"slack","role":"user","content":"\x"}`,
		`{` + id + `,` + ts + `,"channel":"slack","role":"user","content":"\u12"}`,
		`{` + id + `,` + ts + `,"channel":"sl\u0061ck","role":"user","content":"x"}`,
		// timestamps
		`{` + id + `,"timestamp":"2026-01-01t00:00:00z","channel":"slack","role":"user","content":"x"}`,
		`{` + id + `,"timestamp":"2026-12-31T23:59:60Z","channel":"slack","role":"user","content":"x"}`,
		`{` + id + `,"timestamp":"2026-06-30T23:59:60+00:00","channel":"slack","role":"user","content":"x"}`,
		`{` + id + `,"timestamp":"2024-02-29T00:00:00Z","channel":"slack","role":"user","content":"x"}`,
		`{` + id + `,"timestamp":"2026-02-29T00:00:00Z","channel":"slack","role":"user","content":"x"}`,
		`{` + id + `,"timestamp":"2026-01-01T00:00:00+24:00","channel":"slack","role":"user","content":"x"}`,
		`{` + id + `,"timestamp":"2026-01-01T00:00:00-23:59","channel":"slack","role":"user","content":"x"}`,
		`{` + id + `,"timestamp":"2026-01-01T00:00:00.123456789123Z","channel":"slack","role":"user","content":"x"}`,
		`{` + id + `,"timestamp":"2026-01-01T00:00:00.Z","channel":"slack","role":"user","content":"x"}`,
		`{` + id + `,"timestamp":"2026-01-01T00:00:00,5Z","channel":"slack","role":"user","content":"x"}`,
		`{` + id + `,"timestamp":"2026-01-01 00:00:00Z","channel":"slack","role":"user","content":"x"}`,
		`{` + id + `,"timestamp":"\u0032026-01-01T00:00:00Z","channel":"slack","role":"user","content":"x"}`,
		`{` + id + `,"timestamp":"0000-01-01T00:00:00Z","channel":"slack","role":"user","content":"x"}`,
		`{` + id + `,"timestamp":"2026-01-01T00:00:00+01:00","channel":"slack","role":"user","content":"x"}`,
		`{` + id + `,"timestamp":"2026-1-01T00:00:00Z","channel":"slack","role":"user","content":"x"}`,
		`{` + id + `,"timestamp":20260101,"channel":"slack","role":"user","content":"x"}`,
	}
	// nesting far deeper than the fast path follows
	docs = append(docs, `{`+req+`,"meta":{"deep":`+strings.Repeat(`[`, 300)+strings.Repeat(`]`, 300)+`}}`)
	return docs
}

// checkFastAgainstSchema fails t unless the fast path, where it answers,
// gives what the reference gives, and Parse gives what the reference gives.
func checkFastAgainstSchema(t *testing.T, b []byte) {
	t.Helper()
	want, wantErr := parseChecked(b)
	got, ok := ParseFast(b)
	if !ok && got != nil {
		t.Fatalf("fast path gives up but returns an envelope for %q", b)
	}
	if ok {
		if wantErr != nil {
			t.Fatalf("fast path accepts what the schema refuses (%v):\n%q", wantErr, b)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("fast path decodes\n%#v\nwant\n%#v\nfor %q", got, want, b)
		}
	}
	// The reference's own choice among several broken fields varies from
	// call to call (the validator walks a map), so errors compare by class.
	got, err := Parse(b)
	var ve, wantVE *ValidationError
	if (err == nil) != (wantErr == nil) || err != nil && (!errors.As(err, &ve) || !errors.As(wantErr, &wantVE)) {
		t.Fatalf("Parse: got error %v, want %v for %q", err, wantErr, b)
	}
	if err == nil && !reflect.DeepEqual(got, want) {
		t.Fatalf("Parse decodes\n%#v\nwant\n%#v\nfor %q", got, want, b)
	}
}

func TestParseFastTakesGoldens(t *testing.T) {
	t.Parallel()
	for name, b := range goldenEnvelopes(t) {
		t.Run(filepath.Base(filepath.Dir(filepath.Dir(name)))+"/"+filepath.Base(name), func(t *testing.T) {
			t.Parallel()
			if _, ok := parseFast(b); !ok {
				t.Fatalf("fast path gives up on a golden envelope:\n%s", b)
			}
			checkFastAgainstSchema(t, b)
		})
	}
}

func TestParseFastHostile(t *testing.T) {
	t.Parallel()
	took := 0
	for _, doc := range hostile() {
		checkFastAgainstSchema(t, []byte(doc))
		if _, ok := parseFast([]byte(doc)); ok {
			took++
		}
	}
	// The table mixes valid and invalid documents: the fast path must take
	// some of them and leave others to the reference.
	if took == 0 || took == len(hostile()) {
		t.Errorf("fast path took %d of %d hostile documents, want some but not all", took, len(hostile()))
	}
}

// FuzzParseFastMatchesSchema is the differential test of the fast path
// against the JSON Schema validator (with the key-case check and
// encoding/json): whatever the fast path accepts, the reference accepts and
// decodes to the same envelope; whatever it refuses, Parse refuses with the
// reference's error.
func FuzzParseFastMatchesSchema(f *testing.F) {
	for _, b := range goldenEnvelopes(f) {
		f.Add(b)
	}
	raw, err := os.ReadFile("testdata/invalid/cases.json")
	if err != nil {
		f.Fatal(err)
	}
	var cases []struct {
		Doc json.RawMessage `json:"doc"`
	}
	if err := json.Unmarshal(raw, &cases); err != nil {
		f.Fatal(err)
	}
	for _, c := range cases {
		f.Add([]byte(c.Doc))
	}
	for _, doc := range hostile() {
		f.Add([]byte(doc))
	}
	f.Fuzz(checkFastAgainstSchema)
}

// FuzzSmallIntegerMatchesParseFloat: the integer shortcut of the value
// reader gives exactly strconv.ParseFloat's value (sign of zero included),
// or declines.
func FuzzSmallIntegerMatchesParseFloat(f *testing.F) {
	for _, s := range []string{"0", "-0", "1", "-1", "42", "999999999999999", "-999999999999999", "1000000000000000", "1.5", "1e3", "-", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, ok := smallInteger([]byte(s))
		if !ok {
			return
		}
		want, err := strconv.ParseFloat(s, 64)
		if err != nil {
			t.Fatalf("smallInteger(%q) = %v, but ParseFloat fails: %v", s, got, err)
		}
		if got != want || math.Signbit(got) != math.Signbit(want) {
			t.Fatalf("smallInteger(%q) = %v, ParseFloat = %v", s, got, want)
		}
	})
}
