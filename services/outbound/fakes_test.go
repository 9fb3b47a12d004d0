package outbound

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/relaystation/relay/mappers/mapperstest"
	"github.com/relaystation/relay/mappers/webhook"
)

// apis is one local server speaking the shapes of every destination's API:
//
//	/slack/{method}                                 Slack Web API (form posts, {"ok":true,...})
//	/github/repos/{owner}/{repo}/issues/{n}/comments GitHub REST (only octo/hello exists)
//	/sentry/api/0/issues/{id}/comments/             Sentry notes (only issue 4711 exists)
//	/op/api/v3/work_packages/{id}/activities        OpenProject HAL (only work package 42 exists)
//	/hook                                           a Standard Webhooks receiver
//
// script[route] queues answers that replace the next calls of a route
// ("slack:chat.postMessage", "github:POST", "sentry:POST", "op:POST", "hook").
type apis struct {
	t   testing.TB
	srv *httptest.Server

	mu       sync.Mutex
	script   map[string][]func(http.ResponseWriter)
	failAt   map[string]map[int]func(http.ResponseWriter) // route -> call number (1-based) -> answer
	calls    map[string][]time.Time                       // route -> time of every call, scripted or not
	slack    []map[string]string                          // chat.postMessage forms
	github   map[string][]map[string]any
	sentry   []map[string]any
	op       []map[string]any
	hooks    []string // webhook-id of verified hooks
	hookErrs []error
	verifier *webhook.Verifier
	nextID   int
}

func newAPIs(t testing.TB, whSecret webhook.Secret) *apis {
	a := &apis{t: t, script: map[string][]func(http.ResponseWriter){}, calls: map[string][]time.Time{}, failAt: map[string]map[int]func(http.ResponseWriter){},
		github: map[string][]map[string]any{}, verifier: &webhook.Verifier{Secrets: []webhook.Secret{whSecret}}, nextID: 100}
	a.srv = httptest.NewServer(a)
	t.Cleanup(a.srv.Close)
	return a
}

func (a *apis) URL(prefix string) string { return a.srv.URL + "/" + prefix }

func (a *apis) enqueue(route string, f ...func(http.ResponseWriter)) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.script[route] = append(a.script[route], f...)
}

// failCall answers the n-th call (1-based) of route with f.
func (a *apis) failCall(route string, n int, f func(http.ResponseWriter)) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.failAt[route] == nil {
		a.failAt[route] = map[int]func(http.ResponseWriter){}
	}
	a.failAt[route][n] = f
}

func (a *apis) scripted(route string, w http.ResponseWriter) bool {
	a.calls[route] = append(a.calls[route], time.Now())
	if f := a.failAt[route][len(a.calls[route])]; f != nil {
		f(w)
		return true
	}
	if q := a.script[route]; len(q) > 0 {
		a.script[route] = q[1:]
		q[0](w)
		return true
	}
	return false
}

func (a *apis) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	a.mu.Lock()
	defer a.mu.Unlock()
	a.nextID++
	id := a.nextID
	path := r.URL.Path
	switch {
	case strings.HasPrefix(path, "/slack/"):
		a.serveSlack(w, r, body, id)
	case strings.HasPrefix(path, "/github/"):
		a.serveGitHub(w, r, body, id)
	case strings.HasPrefix(path, "/sentry/"):
		a.serveSentry(w, r, body, id)
	case strings.HasPrefix(path, "/op/"):
		a.serveOpenProject(w, r, body, id)
	case path == "/hook":
		a.serveHook(w, r, body)
	default:
		mapperstest.Answer(404, `{}`)(w)
	}
}

// serveSlack answers the Slack Web API methods the outbound worker calls.
func (a *apis) serveSlack(w http.ResponseWriter, r *http.Request, body []byte, id int) {
	method := strings.TrimPrefix(r.URL.Path, "/slack/")
	if a.scripted("slack:"+method, w) {
		return
	}
	r.Body = io.NopCloser(strings.NewReader(string(body)))
	_ = r.ParseForm()
	form := map[string]string{}
	for k := range r.PostForm {
		form[k] = r.PostForm.Get(k)
	}
	w.Header().Set("Content-Type", "application/json")
	switch method {
	case "chat.postMessage":
		form["ts"] = fmt.Sprintf("1700000000.%06d", id)
		a.slack = append(a.slack, form)
		_ = json.NewEncoder(w).Encode(map[string]any{"ok": true, "channel": form["channel"], "ts": form["ts"]})
	case "conversations.replies", "conversations.history":
		var msgs []map[string]any
		for _, p := range a.slack {
			if p["channel"] == form["channel"] && (method == "conversations.history" || p["thread_ts"] == form["ts"]) {
				m := map[string]any{"type": "message", "ts": p["ts"], "text": p["text"]}
				if p["metadata"] != "" {
					m["metadata"] = json.RawMessage(p["metadata"])
				}
				msgs = append(msgs, m)
			}
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"ok": true, "messages": msgs, "has_more": false})
	default:
		_ = json.NewEncoder(w).Encode(map[string]any{"ok": false, "error": "unknown_method"})
	}
}

// serveGitHub answers GitHub issue comment listing and creation.
func (a *apis) serveGitHub(w http.ResponseWriter, r *http.Request, body []byte, id int) {
	var owner, repo string
	var n int
	parts := strings.Split(strings.TrimPrefix(r.URL.Path, "/github/"), "/")
	if len(parts) == 6 && parts[0] == "repos" && parts[3] == "issues" && parts[5] == "comments" {
		owner, repo = parts[1], parts[2]
		n, _ = strconv.Atoi(parts[4])
	}
	if a.scripted("github:"+r.Method, w) {
		return
	}
	if owner != "octo" || repo != "hello" || n == 0 {
		mapperstest.Answer(404, `{"message":"Not Found","documentation_url":"https://docs.github.com/rest"}`)(w)
		return
	}
	issue := fmt.Sprintf("%s/%s#%d", owner, repo, n)
	w.Header().Set("Content-Type", "application/json")
	if r.Method == http.MethodGet {
		_ = json.NewEncoder(w).Encode(append([]map[string]any{}, a.github[issue]...))
		return
	}
	var in struct{ Body string }
	_ = json.Unmarshal(body, &in)
	c := map[string]any{"id": id, "body": in.Body, "html_url": fmt.Sprintf("https://github.com/%s/%s/issues/%d#issuecomment-%d", owner, repo, n, id)}
	a.github[issue] = append(a.github[issue], c)
	w.WriteHeader(http.StatusCreated)
	_ = json.NewEncoder(w).Encode(c)
}

// serveSentry answers Sentry issue note listing and creation.
func (a *apis) serveSentry(w http.ResponseWriter, r *http.Request, body []byte, id int) {
	path := r.URL.Path
	if a.scripted("sentry:"+r.Method, w) {
		return
	}
	if path != "/sentry/api/0/issues/4711/comments/" {
		mapperstest.Answer(404, `{"detail":"The requested resource does not exist"}`)(w)
		return
	}
	if r.Method == http.MethodGet {
		_ = json.NewEncoder(w).Encode(append([]map[string]any{}, a.sentry...))
		return
	}
	var in struct{ Text string }
	_ = json.Unmarshal(body, &in)
	nt := map[string]any{"id": strconv.Itoa(id), "type": "note", "data": map[string]any{"text": in.Text}}
	a.sentry = append(a.sentry, nt)
	mapperstest.Answer(201, mustJSON(nt))(w)
}

// serveOpenProject answers OpenProject work package activities.
func (a *apis) serveOpenProject(w http.ResponseWriter, r *http.Request, body []byte, id int) {
	path := r.URL.Path
	if a.scripted("op:"+r.Method, w) {
		return
	}
	if path != "/op/api/v3/work_packages/42/activities" {
		mapperstest.Answer(404, `{"_type":"Error","message":"The requested resource could not be found."}`)(w)
		return
	}
	if r.Method == http.MethodGet {
		mapperstest.Answer(200, mustJSON(map[string]any{"_type": "Collection", "_embedded": map[string]any{"elements": a.op}}))(w)
		return
	}
	var in struct {
		Comment struct{ Raw string } `json:"comment"`
	}
	_ = json.Unmarshal(body, &in)
	act := map[string]any{"_type": "Activity::Comment", "id": id, "comment": map[string]any{"raw": in.Comment.Raw},
		"_links": map[string]any{"self": map[string]any{"href": fmt.Sprintf("/api/v3/activities/%d", id)}}}
	a.op = append(a.op, act)
	mapperstest.Answer(201, mustJSON(act))(w)
}

// serveHook verifies and records a Standard Webhooks delivery.
func (a *apis) serveHook(w http.ResponseWriter, r *http.Request, body []byte) {
	if a.scripted("hook", w) {
		return
	}
	if err := a.verifier.Verify(r.Header, body); err != nil {
		a.hookErrs = append(a.hookErrs, err)
		mapperstest.Answer(401, `{}`)(w)
		return
	}
	var p struct {
		Type string          `json:"type"`
		Data json.RawMessage `json:"data"`
	}
	if json.Unmarshal(body, &p) != nil || p.Type != "relay.message" || len(p.Data) == 0 {
		mapperstest.Answer(400, `{}`)(w)
		return
	}
	a.hooks = append(a.hooks, r.Header.Get(webhook.HeaderID))
	w.WriteHeader(http.StatusNoContent)
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// count returns how many effects a destination holds.
func (a *apis) count(dest string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	switch dest {
	case DestSlack:
		return len(a.slack)
	case DestGitHub:
		n := 0
		for _, c := range a.github {
			n += len(c)
		}
		return n
	case DestSentry:
		return len(a.sentry)
	case DestOpenProject:
		return len(a.op)
	case DestWebhook:
		return len(a.hooks)
	}
	return -1
}

func (a *apis) callTimes(route string) []time.Time {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]time.Time(nil), a.calls[route]...)
}

func (a *apis) slackPosts() []map[string]string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]map[string]string(nil), a.slack...)
}
