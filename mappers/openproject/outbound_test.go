package openproject_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/relaystation/relay/mappers/mapperstest"
	"github.com/relaystation/relay/mappers/openproject"
	"github.com/relaystation/relay/secret"
)

// obOpenProject is a local OpenProject API v3 for work package activities
// (HAL): GET lists them, POST with {"comment":{"raw":...}} adds one; only work
// package 42 exists. fail answers the next POSTs instead.
type obOpenProject struct {
	mu         sync.Mutex
	activities []map[string]any
	creates    int
	user, pass string
	notify     string
	fail       mapperstest.Queue
}

func (o *obOpenProject) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.user, o.pass, _ = r.BasicAuth()
	w.Header().Set("Content-Type", "application/hal+json")
	if r.URL.Path != "/api/v3/work_packages/42/activities" {
		w.WriteHeader(http.StatusNotFound)
		_, _ = w.Write([]byte(`{"_type":"Error","errorIdentifier":"urn:openproject-org:api:v3:errors:NotFound","message":"The requested resource could not be found."}`))
		return
	}
	switch r.Method {
	case http.MethodGet:
		_ = json.NewEncoder(w).Encode(map[string]any{"_type": "Collection", "total": len(o.activities), "count": len(o.activities),
			"_embedded": map[string]any{"elements": o.activities}})
	case http.MethodPost:
		if o.fail.Next(w) {
			return
		}
		var in struct {
			Comment struct{ Raw string } `json:"comment"`
		}
		_ = json.NewDecoder(r.Body).Decode(&in)
		o.notify = r.URL.Query().Get("notify")
		o.creates++
		id := 500 + o.creates
		a := map[string]any{"_type": "Activity::Comment", "id": id,
			"comment": map[string]any{"format": "markdown", "raw": in.Comment.Raw, "html": "<p>...</p>"},
			"_links":  map[string]any{"self": map[string]any{"href": fmt.Sprintf("/api/v3/activities/%d", id)}}}
		o.activities = append(o.activities, a)
		mapperstest.Created(w, a)
	}
}

func obOPCommenter(t *testing.T) (*obOpenProject, *openproject.Commenter) {
	t.Helper()
	fake := &obOpenProject{}
	c, err := openproject.NewCommenter(openproject.CommenterConfig{BaseURL: mapperstest.Serve(t, fake), Token: secret.New("op-key")})
	if err != nil {
		t.Fatal(err)
	}
	return fake, c
}

func TestOpenProjectCommentOnce(t *testing.T) {
	t.Parallel()
	fake, c := obOPCommenter(t)
	first, err := c.PostComment(t.Context(), 42, "Fixed in `v1.2`.", "out:task-1")
	if err != nil || first.Existing || first.ID == 0 || first.URL == "" {
		t.Fatalf("got %+v, %v, want a new comment", first, err)
	}
	again, err := c.PostComment(t.Context(), 42, "Fixed in `v1.2`.", "out:task-1")
	if err != nil || !again.Existing || again.ID != first.ID {
		t.Fatalf("got %+v, %v, want the existing comment %d", again, err, first.ID)
	}
	fake.mu.Lock()
	defer fake.mu.Unlock()
	if fake.creates != 1 {
		t.Fatalf("got %d comments created, want 1", fake.creates)
	}
	if got, want := fake.activities[0]["comment"].(map[string]any)["raw"], "Fixed in `v1.2`.\n\n<!-- relay:out:task-1 -->"; got != want {
		t.Errorf("got raw %q, want %q", got, want)
	}
	if fake.user != "apikey" || fake.pass != "op-key" || fake.notify != "false" {
		t.Errorf("got basic auth %q:%q notify=%q, want apikey:op-key notify=false", fake.user, fake.pass, fake.notify)
	}
}

func TestOpenProjectCommentErrors(t *testing.T) {
	t.Parallel()
	reply := func(status int, hdr ...string) func(http.ResponseWriter) {
		return mapperstest.Answer(status, `{"_type":"Error","message":"scripted"}`, hdr...)
	}
	mapperstest.RunAPIErrorCases(t, []mapperstest.APIErrorCase{
		{Name: "unknown work package", Target: "7", Status: 404, Permanent: true},
		{Name: "rate limited", Target: "42", Fail: reply(429, "Retry-After", "9"), Status: 429, Retry: 9 * time.Second},
		{Name: "server error", Target: "42", Fail: reply(500), Status: 500},
		{Name: "conflict", Target: "42", Fail: reply(409), Status: 409},
		{Name: "unprocessable", Target: "42", Fail: reply(422), Status: 422, Permanent: true},
	}, func(t *testing.T, wp string, fail mapperstest.Queue) error {
		fake, c := obOPCommenter(t)
		fake.fail = fail
		id, _ := strconv.Atoi(wp)
		_, err := c.PostComment(t.Context(), id, "x", "k")
		return err
	})
	for _, cfg := range []openproject.CommenterConfig{{Token: secret.New("x")}, {BaseURL: "https://op.example.com"}, {BaseURL: "op.example.com", Token: secret.New("x")}} {
		if _, err := openproject.NewCommenter(cfg); err == nil {
			t.Errorf("NewCommenter(%+v): got nil error", cfg)
		}
	}
}
