package fakes

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Comment is an issue comment the fake GitHub holds.
type Comment struct {
	ID     int64
	Owner  string
	Repo   string
	Number int
	Body   string
	Token  string // the Authorization header's token
}

// GitHub is a fake GitHub REST API for issue comments (create and list) and
// repository and organisation webhooks (list, create, edit), on both the
// github.com path layout and the GitHub Enterprise /api/v3 prefix.
type GitHub struct {
	srv      *httptest.Server
	mu       sync.Mutex
	comments []Comment
	fail     []int // status codes to answer the next creates with

	// AdminTokens, when set before the first request, are the tokens that may
	// read and write webhooks (others get 404, as GitHub answers them).
	AdminTokens map[string]bool
	hooks       []Hook
	nextHook    int64
	hookWrites  int
	repos       map[string]*Repo
}

// Repo is a repository the fake knows (GET /repos/{owner}/{name} and its
// /hooks), for `relay doctor`.
type Repo struct {
	Push  bool
	Hooks []Hook
}

// SetRepo makes the fake know the repository "owner/name"; nil forgets it.
func (g *GitHub) SetRepo(fullName string, r *Repo) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.repos == nil {
		g.repos = map[string]*Repo{}
	}
	g.repos[fullName] = r
	// The repository's webhooks are those of the hooks API (github_hooks.go).
	kept := g.hooks[:0]
	for _, h := range g.hooks {
		if h.Of != fullName {
			kept = append(kept, h)
		}
	}
	g.hooks = kept
	if r != nil {
		for _, h := range r.Hooks {
			g.nextHook++
			h.ID, h.Of = 100+g.nextHook, fullName
			g.hooks = append(g.hooks, h)
		}
	}
}

var repoPath = regexp.MustCompile(`^(?:/api/v3)?/repos/([^/]+/[^/]+)$`)

// serveMeta answers GET /user (any token) and /repos/{o}/{r};
// it reports whether it answered.
func (g *GitHub) serveMeta(w http.ResponseWriter, r *http.Request) bool {
	if r.Method != http.MethodGet {
		return false
	}
	if strings.TrimPrefix(r.URL.Path, "/api/v3") == "/user" {
		if r.Header.Get("Authorization") == "" {
			w.WriteHeader(http.StatusUnauthorized)
			fmt.Fprint(w, `{"message":"Requires authentication"}`)
			return true
		}
		fmt.Fprint(w, `{"login":"relay-bot","id":1}`)
		return true
	}
	m := repoPath.FindStringSubmatch(r.URL.Path)
	if m == nil {
		return false
	}
	g.mu.Lock()
	repo := g.repos[m[1]]
	var out any
	if repo != nil {
		out = map[string]any{"full_name": m[1], "permissions": map[string]bool{"push": repo.Push, "admin": repo.Push}}
	}
	g.mu.Unlock()
	if out == nil {
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprint(w, `{"message":"Not Found"}`)
		return true
	}
	_ = json.NewEncoder(w).Encode(out)
	return true
}

var commentsPath = regexp.MustCompile(`^(?:/api/v3)?/repos/([^/]+)/([^/]+)/issues/(\d+)/comments$`)

// NewGitHub starts a fake GitHub API, closed when the test ends.
func NewGitHub(t Cleaner) *GitHub {
	g := &GitHub{}
	g.srv = httptest.NewServer(http.HandlerFunc(g.serve))
	t.Cleanup(g.srv.Close)
	return g
}

// URL is the API base to configure as GITHUB_API_URL.
func (g *GitHub) URL() string { return g.srv.URL + "/" }

// FailNext makes the next creates answer these statuses (429 carries Retry-After: 1).
func (g *GitHub) FailNext(statuses ...int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.fail = append(g.fail, statuses...)
}

// Comments returns the comments created so far.
func (g *GitHub) Comments() []Comment {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]Comment(nil), g.comments...)
}

func (g *GitHub) serve(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	if hm := hooksPath.FindStringSubmatch(r.URL.Path); hm != nil {
		g.serveHooks(w, r, hm)
		return
	}
	if g.serveMeta(w, r) {
		return
	}
	m := commentsPath.FindStringSubmatch(r.URL.Path)
	if m == nil {
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprint(w, `{"message":"Not Found","documentation_url":"https://docs.github.com/rest"}`)
		return
	}
	owner, repo := m[1], m[2]
	number, _ := strconv.Atoi(m[3])
	switch r.Method {
	case http.MethodGet:
		g.mu.Lock()
		var list []map[string]any
		for _, c := range g.comments {
			if c.Owner == owner && c.Repo == repo && c.Number == number {
				list = append(list, g.render(c))
			}
		}
		g.mu.Unlock()
		if list == nil {
			list = []map[string]any{}
		}
		_ = json.NewEncoder(w).Encode(list)
	case http.MethodPost:
		var body struct {
			Body string `json:"body"`
		}
		raw, _ := io.ReadAll(r.Body)
		if err := json.Unmarshal(raw, &body); err != nil || body.Body == "" {
			w.WriteHeader(http.StatusUnprocessableEntity)
			fmt.Fprint(w, `{"message":"Validation Failed"}`)
			return
		}
		g.mu.Lock()
		if len(g.fail) > 0 {
			status := g.fail[0]
			g.fail = g.fail[1:]
			g.mu.Unlock()
			if status == http.StatusTooManyRequests || status == http.StatusForbidden {
				w.Header().Set("Retry-After", "1")
			}
			w.WriteHeader(status)
			fmt.Fprintf(w, `{"message":"%s"}`, http.StatusText(status))
			return
		}
		c := Comment{ID: int64(len(g.comments) + 1000), Owner: owner, Repo: repo, Number: number, Body: body.Body,
			Token: strings.TrimPrefix(strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer "), "token ")}
		g.comments = append(g.comments, c)
		out := g.render(c)
		g.mu.Unlock()
		w.WriteHeader(http.StatusCreated)
		_ = json.NewEncoder(w).Encode(out)
	default:
		w.WriteHeader(http.StatusMethodNotAllowed)
	}
}

func (g *GitHub) render(c Comment) map[string]any {
	return map[string]any{
		"id": c.ID, "node_id": fmt.Sprintf("IC_%d", c.ID), "body": c.Body,
		"html_url":   fmt.Sprintf("https://github.com/%s/%s/issues/%d#issuecomment-%d", c.Owner, c.Repo, c.Number, c.ID),
		"user":       map[string]any{"login": "relay-bot", "id": 1, "type": "Bot"},
		"created_at": time.Now().UTC().Format(time.RFC3339), "updated_at": time.Now().UTC().Format(time.RFC3339),
	}
}
