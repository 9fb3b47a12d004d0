package approvals_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
)

// slackCall is one Web API call the fake received: the method and its
// parameters (form fields, or the top-level keys of a JSON body, objects kept
// as JSON text).
type slackCall struct {
	Method string
	Params map[string]string
}

// fakeSlack is a local Slack Web API speaking the real request and response
// shapes of the methods the worker calls. It records every call.
type fakeSlack struct {
	srv *httptest.Server

	mu     sync.Mutex
	calls  []slackCall
	seq    int
	groups map[string][]string
	// fail maps a method to the Slack error it answers with.
	fail map[string]string
	// wsURL is what apps.connections.open answers.
	wsURL string
	// posted, when set, receives every chat.postMessage call.
	posted chan slackCall
}

func newFakeSlack(t testing.TB) *fakeSlack {
	t.Helper()
	f := &fakeSlack{groups: map[string][]string{}, fail: map[string]string{}}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

// URL is the API base to configure (SLACK_API_URL).
func (f *fakeSlack) URL() string { return f.srv.URL + "/api/" }

func (f *fakeSlack) serve(w http.ResponseWriter, r *http.Request) {
	method := strings.TrimPrefix(r.URL.Path, "/api/")
	params := map[string]string{}
	body, _ := io.ReadAll(r.Body)
	if strings.HasPrefix(r.Header.Get("Content-Type"), "application/json") {
		var m map[string]json.RawMessage
		_ = json.Unmarshal(body, &m)
		for k, v := range m {
			var s string
			if json.Unmarshal(v, &s) == nil {
				params[k] = s
			} else {
				params[k] = string(v)
			}
		}
	} else {
		vals, _ := url.ParseQuery(string(body))
		for k := range vals {
			params[k] = vals.Get(k)
		}
		for k := range r.URL.Query() {
			params[k] = r.URL.Query().Get(k)
		}
	}
	delete(params, "token")
	f.mu.Lock()
	f.seq++
	seq := f.seq
	ts := fmt.Sprintf("1700000000.%06d", seq)
	params["_ts"] = ts // the ts this call was answered with
	f.calls = append(f.calls, slackCall{Method: method, Params: params})
	failWith := f.fail[method]
	members, groupKnown := f.groups[params["usergroup"]]
	wsURL := f.wsURL
	posted := f.posted
	f.mu.Unlock()
	if posted != nil && method == "chat.postMessage" {
		defer func() { posted <- slackCall{Method: method, Params: params} }()
	}

	w.Header().Set("Content-Type", "application/json")
	if failWith != "" {
		fmt.Fprintf(w, `{"ok":false,"error":%q}`, failWith)
		return
	}
	var resp any
	switch method {
	case "chat.postMessage":
		resp = map[string]any{"ok": true, "channel": params["channel"], "ts": ts,
			"message": map[string]any{"type": "message", "ts": ts, "text": params["text"]}}
	case "chat.update":
		resp = map[string]any{"ok": true, "channel": params["channel"], "ts": params["ts"], "text": params["text"]}
	case "chat.postEphemeral":
		resp = map[string]any{"ok": true, "message_ts": ts}
	case "views.open":
		resp = map[string]any{"ok": true, "view": map[string]any{"id": fmt.Sprintf("V%06d", seq), "type": "modal"}}
	case "usergroups.users.list":
		if !groupKnown {
			resp = map[string]any{"ok": false, "error": "no_such_subteam"}
		} else {
			resp = map[string]any{"ok": true, "users": members}
		}
	case "apps.connections.open":
		resp = map[string]any{"ok": true, "url": wsURL}
	default:
		resp = map[string]any{"ok": false, "error": "unknown_method"}
	}
	_ = json.NewEncoder(w).Encode(resp)
}

// Calls returns the recorded calls of method ("" for all).
func (f *fakeSlack) Calls(method string) []slackCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []slackCall
	for _, c := range f.calls {
		if method == "" || c.Method == method {
			out = append(out, c)
		}
	}
	return out
}

func (f *fakeSlack) setGroup(id string, members ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.groups[id] = members
}

func (f *fakeSlack) setFail(method, slackErr string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fail[method] = slackErr
}
