package github_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/relaystation/relay/mappers"
	"github.com/relaystation/relay/mappers/github"
	"github.com/relaystation/relay/mappers/mapperstest"
	"github.com/relaystation/relay/secret"
)

// obGitHub is a local GitHub REST API for issue comments: it lists (with
// since, per_page, page and Link headers, oldest first, like GitHub) and
// creates comments of octo/hello issues; other repositories are 404. fail
// answers the next create calls instead.
type obGitHub struct {
	mu       sync.Mutex
	comments map[int][]map[string]any
	nextID   int64
	creates  int
	lists    int
	fail     mapperstest.Queue
	auth     string
}

func newObGitHub(t *testing.T) (*obGitHub, *httptest.Server) {
	g := &obGitHub{comments: map[int][]map[string]any{}, nextID: 1000}
	srv := httptest.NewServer(g)
	t.Cleanup(srv.Close)
	return g, srv
}

func (g *obGitHub) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.auth = r.Header.Get("Authorization")
	var num int
	if _, err := fmt.Sscanf(r.URL.Path, "/repos/octo/hello/issues/%d/comments", &num); err != nil {
		w.WriteHeader(http.StatusNotFound)
		_, _ = w.Write([]byte(`{"message":"Not Found","documentation_url":"https://docs.github.com/rest"}`))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	switch r.Method {
	case http.MethodGet:
		g.lists++
		var since time.Time
		if s := r.URL.Query().Get("since"); s != "" {
			since, _ = time.Parse(time.RFC3339, s)
		}
		var all []map[string]any
		for _, c := range g.comments[num] {
			if !c["updated_at"].(time.Time).Before(since) {
				all = append(all, c)
			}
		}
		per, _ := strconv.Atoi(r.URL.Query().Get("per_page"))
		if per <= 0 {
			per = 30
		}
		page, _ := strconv.Atoi(r.URL.Query().Get("page"))
		page = max(page, 1)
		lo, hi := min((page-1)*per, len(all)), min(page*per, len(all))
		if hi < len(all) {
			q := r.URL.Query()
			q.Set("page", strconv.Itoa(page+1))
			w.Header().Set("Link", fmt.Sprintf(`<http://%s%s?%s>; rel="next"`, r.Host, r.URL.Path, q.Encode()))
		}
		_ = json.NewEncoder(w).Encode(all[lo:hi])
	case http.MethodPost:
		if g.fail.Next(w) {
			return
		}
		var in struct{ Body string }
		_ = json.NewDecoder(r.Body).Decode(&in)
		g.creates++
		g.nextID++
		c := map[string]any{
			"id": g.nextID, "body": in.Body, "updated_at": time.Now().UTC(),
			"html_url": fmt.Sprintf("https://github.com/octo/hello/issues/%d#issuecomment-%d", num, g.nextID),
		}
		g.comments[num] = append(g.comments[num], c)
		w.WriteHeader(http.StatusCreated)
		_ = json.NewEncoder(w).Encode(c)
	}
}

// seed adds n comments by other people, updated at at.
func (g *obGitHub) seed(num, n int, at time.Time, body func(i int) string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for i := 0; i < n; i++ {
		g.nextID++
		g.comments[num] = append(g.comments[num], map[string]any{"id": g.nextID, "body": body(i), "updated_at": at, "html_url": "https://github.com/x"})
	}
}

func (g *obGitHub) counts() (creates, lists int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.creates, g.lists
}

func obCommenter(t *testing.T, apiURL string) *github.Commenter {
	t.Helper()
	c, err := github.NewCommenter(github.CommenterConfig{Token: secret.New("ghp_test"), APIURL: apiURL})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestPostCommentOnce(t *testing.T) {
	t.Parallel()
	fake, srv := newObGitHub(t)
	c := obCommenter(t, srv.URL)
	ctx := t.Context()
	start := time.Now().Add(-time.Minute)
	// 250 older comments (three pages), some quoting another key's marker.
	fake.seed(7, 250, start.Add(time.Second), func(i int) string { return fmt.Sprintf("comment %d %s", i, mappers.Marker("out:other")) })

	first, err := c.PostComment(ctx, "octo", "hello", 7, "The **answer**.", "out:task-1", start)
	if err != nil {
		t.Fatal(err)
	}
	if first.Existing || first.ID == 0 || !strings.Contains(first.URL, "issuecomment-") {
		t.Fatalf("got %+v, want a new comment", first)
	}
	// Again with the same key (a redelivery, or a retry after a crash before
	// anything was recorded): found by its marker, nothing created.
	again, err := c.PostComment(ctx, "octo", "hello", 7, "The **answer**.", "out:task-1", start)
	if err != nil {
		t.Fatal(err)
	}
	if !again.Existing || again.ID != first.ID {
		t.Fatalf("got %+v, want the existing comment %d", again, first.ID)
	}
	creates, lists := fake.counts()
	if creates != 1 {
		t.Fatalf("got %d comments created, want 1", creates)
	}
	if lists < 6 {
		t.Errorf("got %d list calls, want every page read twice (>= 6)", lists)
	}
	fake.mu.Lock()
	body := fake.comments[7][len(fake.comments[7])-1]["body"].(string)
	auth := fake.auth
	fake.mu.Unlock()
	if want := "The **answer**.\n\n<!-- relay:out:task-1 -->"; body != want {
		t.Errorf("got body %q, want %q", body, want)
	}
	if auth != "Bearer ghp_test" {
		t.Errorf("got Authorization %q, want the token", auth)
	}
	// Another key comments again.
	if other, err := c.PostComment(ctx, "octo", "hello", 7, "Another.", "out:task-2", start); err != nil || other.Existing {
		t.Fatalf("got %+v, %v, want a new comment for another key", other, err)
	}
}

func TestPostCommentErrors(t *testing.T) {
	t.Parallel()
	reply := mapperstest.Answer
	cases := []struct {
		name      string
		repo      string
		fail      func(http.ResponseWriter)
		status    int
		permanent bool
		retry     time.Duration
	}{
		{"not found", "nope", nil, 404, true, 0},
		{"429 with Retry-After", "hello", reply(429, `{"message":"slow down"}`, "Retry-After", "12"), 429, false, 12 * time.Second},
		{"secondary rate limit", "hello", reply(403, `{"message":"You have exceeded a secondary rate limit","documentation_url":"https://docs.github.com/rest/overview/rate-limits-for-the-rest-api#about-secondary-rate-limits"}`, "Retry-After", "30"), 403, false, 30 * time.Second},
		{"server error", "hello", reply(502, `{"message":"Bad Gateway"}`), 502, false, 0},
		{"validation failed", "hello", reply(422, `{"message":"Validation Failed"}`), 422, true, 0},
		{"forbidden", "hello", reply(403, `{"message":"Resource not accessible by integration"}`), 403, true, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			fake, srv := newObGitHub(t)
			if tc.fail != nil {
				fake.fail = append(fake.fail, tc.fail)
			}
			_, err := obCommenter(t, srv.URL).PostComment(t.Context(), "octo", tc.repo, 7, "x", "k", time.Time{})
			var pe *github.PostError
			if !errors.As(err, &pe) {
				t.Fatalf("got %v (%T), want a *github.PostError", err, err)
			}
			if pe.Status != tc.status || pe.Permanent() != tc.permanent || pe.RetryDelay() != tc.retry {
				t.Fatalf("got status=%d permanent=%v retry=%s, want %d %v %s (%v)", pe.Status, pe.Permanent(), pe.RetryDelay(), tc.status, tc.permanent, tc.retry, err)
			}
		})
	}
	if _, err := github.NewCommenter(github.CommenterConfig{}); !errors.Is(err, github.ErrNoToken) {
		t.Fatalf("got %v without a token, want ErrNoToken", err)
	}
	if _, err := github.NewCommenter(github.CommenterConfig{Token: secret.New("x"), APIURL: "not a url"}); err == nil {
		t.Fatal("got nil error for a bad API URL")
	}
}
