package session

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"
)

// FuzzKVSessionJSON: the session value's encoder writes exactly what
// json.Marshal writes, and fails where it fails.
func FuzzKVSessionJSON(f *testing.F) {
	f.Add("", "e1", "user", "hello <b>&amp;</b>", int64(1767323045), int64(5), "", true)
	f.Add("a summary\n", "e\u2028", "assistant", "caf\xe9 \x00", int64(-62135596800), int64(0), "old", false)
	f.Add("s", "", "", "", int64(253402300800), int64(999999999), "x", true) // year 10000: Marshal refuses
	f.Fuzz(func(t *testing.T, summary, id, role, content string, sec, nsec int64, seen string, nilTurns bool) {
		v := kvSession{Summary: summary}
		if !nilTurns {
			tm := time.Unix(sec, nsec%1e9).In(time.FixedZone("x", int(sec%50000)))
			v.Turns = []Turn{{ID: id, Role: role, Content: content, Time: tm}, {ID: content, Role: id, Time: tm.UTC()}}
		}
		if seen != "" {
			v.Seen = []string{seen, id}
		}
		want, werr := json.Marshal(&v)
		got, gerr := v.appendJSON(nil)
		if (werr != nil) != (gerr != nil) {
			t.Fatalf("errors differ: Marshal %v, appendJSON %v", werr, gerr)
		}
		if werr == nil && !bytes.Equal(got, want) {
			t.Fatalf("appendJSON\n%s\nMarshal\n%s", got, want)
		}
	})
}
