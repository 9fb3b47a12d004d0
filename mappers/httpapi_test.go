package mappers_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/relaystation/relay/mappers"
)

func TestMarker(t *testing.T) {
	t.Parallel()
	cases := map[string]string{
		"out:1b4e28ba-2fa1-11d2-883f-0016d3cca427": "<!-- relay:out:1b4e28ba-2fa1-11d2-883f-0016d3cca427 -->",
		"bad --> key": "<!-- relay:sha256:",
		"a--b":        "<!-- relay:sha256:",
		"":            "<!-- relay:sha256:",
	}
	for key, want := range cases {
		if got := mappers.Marker(key); !strings.HasPrefix(got, want) || strings.Count(got, "--") != 2 {
			t.Errorf("Marker(%q): got %q, want prefix %q and no inner --", key, got, want)
		}
	}
}

func TestRetryAfter(t *testing.T) {
	t.Parallel()
	now := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	h := func(kv ...string) http.Header {
		out := http.Header{}
		for i := 0; i+1 < len(kv); i += 2 {
			out.Set(kv[i], kv[i+1])
		}
		return out
	}
	cases := []struct {
		name   string
		header http.Header
		want   time.Duration
		ok     bool
	}{
		{"none", h(), 0, false},
		{"empty", h("Retry-After", ""), 0, false},
		{"seconds", h("Retry-After", "30"), 30 * time.Second, true},
		{"spaces", h("Retry-After", " 7 "), 7 * time.Second, true},
		{"zero", h("Retry-After", "0"), 0, true},
		{"fraction", h("Retry-After", "1.5"), 1500 * time.Millisecond, true},
		{"negative", h("Retry-After", "-1"), 0, false},
		{"garbage", h("Retry-After", "soon"), 0, false},
		{"capped", h("Retry-After", "999999"), mappers.MaxRetryAfter, true},
		{"huge", h("Retry-After", "1e300"), mappers.MaxRetryAfter, true},
		{"date", h("Retry-After", now.Add(90*time.Second).Format(http.TimeFormat)), 90 * time.Second, true},
		{"date in the past", h("Retry-After", now.Add(-time.Minute).Format(http.TimeFormat)), 0, true},
		{"ms", h("retry-after-ms", "250"), 250 * time.Millisecond, true},
		{"ms first", h("Retry-After-Ms", "250", "Retry-After", "9"), 250 * time.Millisecond, true},
		{"bad ms falls back", h("Retry-After-Ms", "x", "Retry-After", "9"), 9 * time.Second, true},
		{"ms capped", h("Retry-After-Ms", "1e18"), mappers.MaxRetryAfter, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, ok := mappers.RetryAfter(tc.header, now)
			if got != tc.want || ok != tc.ok {
				t.Errorf("RetryAfter(%v): got %s %v, want %s %v", tc.header, got, ok, tc.want, tc.ok)
			}
		})
	}
}

// FuzzRetryAfter: any header value reads as a delay within [0, MaxRetryAfter].
func FuzzRetryAfter(f *testing.F) {
	for _, v := range []string{"", "30", "-1", "1.5", "1e300", "NaN", "Inf", "Wed, 21 Oct 2015 07:28:00 GMT"} {
		f.Add(v, v)
	}
	now := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	f.Fuzz(func(t *testing.T, secs, ms string) {
		h := http.Header{"Retry-After": {secs}, "Retry-After-Ms": {ms}}
		if d, ok := mappers.RetryAfter(h, now); d < 0 || d > mappers.MaxRetryAfter || (!ok && d != 0) {
			t.Fatalf("RetryAfter(%q, %q) = %s %v: want within [0, %s]", secs, ms, d, ok, mappers.MaxRetryAfter)
		}
	})
}

func TestPermanentStatus(t *testing.T) {
	t.Parallel()
	for code, want := range map[int]bool{0: false, 200: false, 301: true, 400: true, 401: true, 404: true,
		408: false, 409: false, 422: true, 425: false, 429: false, 500: false, 503: false} {
		if got := mappers.PermanentStatus(code); got != want {
			t.Errorf("PermanentStatus(%d): got %v, want %v", code, got, want)
		}
	}
}

func TestWithMarker(t *testing.T) {
	t.Parallel()
	got := mappers.WithMarker("answer\n\n", "out:1")
	if want := "answer\n\n<!-- relay:out:1 -->"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestJSONAPI(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer t0k" {
			w.WriteHeader(http.StatusUnauthorized)
			fmt.Fprint(w, `{"detail":"bad token"}`)
			return
		}
		switch r.URL.Path {
		case "/ok":
			body, _ := io.ReadAll(r.Body)
			fmt.Fprintf(w, `{"echo":%q,"ct":%q,"accept":%q}`, body, r.Header.Get("Content-Type"), r.Header.Get("Accept"))
		case "/slow-down":
			w.Header().Set("Retry-After", "3")
			w.WriteHeader(http.StatusTooManyRequests)
		case "/garbled":
			fmt.Fprint(w, `{not json`)
		default:
			w.WriteHeader(http.StatusNotFound)
			fmt.Fprint(w, `{"detail":"no such issue"}`)
		}
	}))
	defer srv.Close()
	api := &mappers.JSONAPI{
		Provider:  "test",
		Client:    srv.Client(),
		Authorize: func(r *http.Request) { r.Header.Set("Authorization", "Bearer t0k") },
		Message: func(b []byte) string {
			var d struct{ Detail string }
			_ = json.Unmarshal(b, &d)
			return d.Detail
		},
	}
	ctx := t.Context()

	var out struct{ Echo, CT, Accept string }
	if err := api.Do(ctx, http.MethodPost, srv.URL+"/ok", []byte(`{"a":1}`), &out); err != nil {
		t.Fatal(err)
	}
	if out.Echo != `{"a":1}` || out.CT != "application/json" || out.Accept != "application/json" {
		t.Errorf("got %+v, want the body echoed with JSON content type and accept", out)
	}

	for _, tc := range []struct {
		path          string
		status        int
		permanent     bool
		message       string
		retryAfter    time.Duration
		wantDecodeErr bool
	}{
		{"/missing", 404, true, "no such issue", 0, false},
		{"/slow-down", 429, false, "", 3 * time.Second, false},
		{"/garbled", 200, false, "", 0, true},
	} {
		err := api.Do(ctx, http.MethodGet, srv.URL+tc.path, nil, &out)
		var ae *mappers.APIError
		if !errors.As(err, &ae) {
			t.Fatalf("%s: got %v, want *APIError", tc.path, err)
		}
		if ae.Status != tc.status || ae.Permanent() != tc.permanent || ae.Message != tc.message ||
			ae.RetryDelay() != tc.retryAfter || (ae.Err != nil) != tc.wantDecodeErr {
			t.Errorf("%s: got status %d permanent %v message %q retry %s err %v", tc.path, ae.Status, ae.Permanent(), ae.Message, ae.RetryDelay(), ae.Err)
		}
		if !strings.HasPrefix(err.Error(), "test GET "+srv.URL+tc.path) {
			t.Errorf("%s: error %q does not name the provider and call", tc.path, err)
		}
	}

	var ae *mappers.APIError
	if err := api.Do(ctx, "BAD METHOD", srv.URL, nil, nil); !errors.As(err, &ae) || !ae.Permanent() {
		t.Errorf("a request that cannot be built: got %v, want a permanent *APIError", err)
	}
	down := &mappers.JSONAPI{Provider: "test", Client: srv.Client()}
	if err := down.Do(ctx, http.MethodGet, "http://127.0.0.1:1/x", nil, nil); !errors.As(err, &ae) || ae.Permanent() || ae.Status != 0 {
		t.Errorf("no answer: got %v, want a transient *APIError", err)
	}
}

func TestID(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]mappers.ID{`"abc"`: "abc", `42`: "42", `null`: "", `1e3`: "1e3"} {
		var got mappers.ID
		if err := json.Unmarshal([]byte(in), &got); err != nil || got != want {
			t.Errorf("ID %s: got %q (%v), want %q", in, got, err, want)
		}
	}
	var bad mappers.ID
	if err := json.Unmarshal([]byte(`{}`), &bad); err == nil {
		t.Error("an object decoded as an ID")
	}
}

func TestClipKeepsMarker(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("word ", 30)
	marker := mappers.Marker("out:task-1")
	hashed := mappers.Marker("key with spaces")
	for _, tc := range []struct{ name, in, want string }{
		{"fits", "short", "short"},
		{"cut, no marker", long, long[:20] + "…"},
		{"cut drops the marker", mappers.WithMarker(long, "out:task-1"), long[:20] + "…\n\n" + marker},
		{"cut drops a hashed marker", mappers.WithMarker(long, "key with spaces"), long[:20] + "…\n\n" + hashed},
		{"cut inside the marker", long[:15] + marker, long[:15] + "<!-- …\n\n" + marker},
		{"cut keeps the marker", marker + long, marker[:20] + "…"},
		{"unterminated marker", long + "<!-- relay:x", long[:20] + "…"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := mappers.Clip(tc.in, 20); got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}
