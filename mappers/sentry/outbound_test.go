package sentry_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/relaystation/relay/mappers/mapperstest"
	"github.com/relaystation/relay/mappers/sentry"
	"github.com/relaystation/relay/secret"
)

// obSentry is a local Sentry web API for issue comments (notes): GET lists
// them newest first, POST creates one; issue 404 does not exist. fail answers
// the next POSTs instead.
type obSentry struct {
	mu      sync.Mutex
	notes   []map[string]any
	creates int
	auth    string
	fail    mapperstest.Queue
}

func (s *obSentry) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.auth = r.Header.Get("Authorization")
	if r.URL.Path != "/api/0/issues/4711/comments/" {
		w.WriteHeader(http.StatusNotFound)
		_, _ = w.Write([]byte(`{"detail":"The requested resource does not exist"}`))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	switch r.Method {
	case http.MethodGet:
		out := make([]map[string]any, 0, len(s.notes))
		for i := len(s.notes) - 1; i >= 0; i-- {
			out = append(out, s.notes[i])
		}
		_ = json.NewEncoder(w).Encode(out)
	case http.MethodPost:
		if s.fail.Next(w) {
			return
		}
		var in struct{ Text string }
		if err := json.NewDecoder(r.Body).Decode(&in); err != nil || in.Text == "" {
			w.WriteHeader(http.StatusBadRequest)
			_, _ = w.Write([]byte(`{"detail":"text is required"}`))
			return
		}
		s.creates++
		n := map[string]any{"id": "9" + strings.Repeat("0", s.creates), "type": "note", "data": map[string]any{"text": in.Text}}
		s.notes = append(s.notes, n)
		mapperstest.Created(w, n)
	}
}

func obSentryCommenter(t *testing.T) (*obSentry, *sentry.Commenter) {
	t.Helper()
	fake := &obSentry{}
	c, err := sentry.NewCommenter(sentry.CommenterConfig{Token: secret.New("sntrys_test"), APIURL: mapperstest.Serve(t, fake) + "/"})
	if err != nil {
		t.Fatal(err)
	}
	return fake, c
}

func TestSentryCommentOnce(t *testing.T) {
	t.Parallel()
	fake, c := obSentryCommenter(t)
	first, err := c.PostComment(t.Context(), "4711", "Root cause: **nil map**.", "out:task-1")
	if err != nil || first.Existing || first.ID == "" {
		t.Fatalf("got %+v, %v, want a new comment", first, err)
	}
	again, err := c.PostComment(t.Context(), "4711", "Root cause: **nil map**.", "out:task-1")
	if err != nil || !again.Existing || again.ID != first.ID {
		t.Fatalf("got %+v, %v, want the existing comment %s", again, err, first.ID)
	}
	fake.mu.Lock()
	defer fake.mu.Unlock()
	if fake.creates != 1 {
		t.Fatalf("got %d comments created, want 1", fake.creates)
	}
	if got, want := fake.notes[0]["data"].(map[string]any)["text"], "Root cause: **nil map**.\n\n<!-- relay:out:task-1 -->"; got != want {
		t.Errorf("got text %q, want %q", got, want)
	}
	if fake.auth != "Bearer sntrys_test" {
		t.Errorf("got Authorization %q, want the bearer token", fake.auth)
	}
}

func TestSentryCommentErrors(t *testing.T) {
	t.Parallel()
	reply := func(status int, hdr ...string) func(http.ResponseWriter) {
		return mapperstest.Answer(status, `{"detail":"nope"}`, hdr...)
	}
	mapperstest.RunAPIErrorCases(t, []mapperstest.APIErrorCase{
		{Name: "unknown issue", Target: "404", Status: 404, Permanent: true},
		{Name: "rate limited", Target: "4711", Fail: reply(429, "Retry-After", "5"), Status: 429, Retry: 5 * time.Second},
		{Name: "server error", Target: "4711", Fail: reply(503), Status: 503},
		{Name: "forbidden", Target: "4711", Fail: reply(403), Status: 403, Permanent: true},
	}, func(t *testing.T, issue string, fail mapperstest.Queue) error {
		fake, c := obSentryCommenter(t)
		fake.fail = fail
		_, err := c.PostComment(t.Context(), issue, "x", "k")
		return err
	})
	if _, err := sentry.NewCommenter(sentry.CommenterConfig{}); !errors.Is(err, sentry.ErrNoToken) {
		t.Fatalf("got %v without a token, want ErrNoToken", err)
	}
}
