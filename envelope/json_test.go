package envelope_test

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/relaystation/relay/envelope"
)

// FuzzAppendJSONMatchesMarshal checks AppendJSON byte for byte against
// json.Marshal on decoded JSON values (objects, lists, strings, numbers,
// bools, null) and on the same values with their numbers as ints.
func FuzzAppendJSONMatchesMarshal(f *testing.F) {
	for _, s := range []string{`{"b":1,"a":{"y":[2,"x",null,true]}}`, `"<a href=\"x\">&amp;</a>\u2028\u0001\ud800"`,
		`[{"z":{}},[],""]`, `{"é":"\u00e9","":0.000001,"k":1e21}`, `null`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var v any
		if json.Unmarshal(b, &v) != nil {
			return
		}
		for _, v := range []any{v, ints(v)} {
			want, werr := json.Marshal(v)
			got, gerr := envelope.AppendJSON([]byte("prefix"), v)
			if (werr == nil) != (gerr == nil) {
				t.Fatalf("AppendJSON err %v, json.Marshal err %v", gerr, werr)
			}
			if werr == nil && !bytes.Equal(got, append([]byte("prefix"), want...)) {
				t.Fatalf("got %s, want prefix%s", got, want)
			}
		}
	})
}

// ints returns v with every whole number as an int.
func ints(v any) any {
	switch x := v.(type) {
	case float64:
		if x == float64(int(x)) {
			return int(x)
		}
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = ints(e)
		}
		return out
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = ints(e)
		}
		return out
	}
	return v
}

func TestAppendStringAndTimeMatchMarshal(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"", "plain", "<>&\"\\\n\r\t\b\f\x01", "\u2028\u2029", "\xff\xfe", "é日本"} {
		want, _ := json.Marshal(s)
		if got := envelope.AppendString(nil, s); !bytes.Equal(got, want) {
			t.Errorf("AppendString(%q): got %s, want %s", s, got, want)
		}
	}
	for _, tm := range []time.Time{time.Unix(0, 0).UTC(), time.Date(2026, 11, 23, 6, 1, 2, 3000, time.UTC), time.Date(2026, 1, 2, 3, 4, 5, 0, time.FixedZone("x", 3600))} {
		want, _ := json.Marshal(tm)
		got, err := envelope.AppendTime(nil, tm)
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("AppendTime(%v): got %s, %v; want %s", tm, got, err, want)
		}
	}
	if _, err := envelope.AppendTime(nil, time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)); err == nil {
		t.Error("AppendTime of year 10000: got no error, want MarshalJSON's")
	}
}
