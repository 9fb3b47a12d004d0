// Package fakes are local HTTP servers that speak the real API shapes of the
// services the relay talks to but tests cannot reach: the Slack Web API, the
// GitHub REST API and an OpenAI-compatible chat endpoint. They record what
// they receive so end-to-end tests can assert on it.
package fakes

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
)

// SlackCall is one Web API call: the method and its parameters (form fields,
// or the top-level keys of a JSON body; objects and arrays kept as JSON text).
type SlackCall struct {
	Method string
	Params map[string]string
}

// Slack is a fake Slack Web API. Safe for concurrent use.
type Slack struct {
	srv    *httptest.Server
	mu     sync.Mutex
	calls  []SlackCall
	seq    int
	groups map[string][]string
	fail   map[string]string
	hook   func(SlackCall)
	wsURL  string
	msgs   []map[string]any  // posted messages, for conversations.history and .replies
	files  map[string][]byte // uploaded file contents by file id (files.getUploadURLExternal)
	scopes string            // auth.test's X-OAuth-Scopes; "" sends none
	member map[string]bool   // channels the bot is in (conversations.info)
	skew   time.Duration     // added to the Date header's time
}

// SetClockSkew makes the fake's Date header d off the real time.
func (f *Slack) SetClockSkew(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.skew = d
}

// SetScopes makes auth.test answer with the X-OAuth-Scopes header scopes
// (comma-separated), as Slack tells a token's granted scopes.
func (f *Slack) SetScopes(scopes string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.scopes = scopes
}

// SetMember makes conversations.info say whether the bot is in channel.
func (f *Slack) SetMember(channel string, member bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.member[channel] = member
}

// OnCall makes the fake call fn for every call it receives, after recording
// it (benchmarks take their timestamps there).
func (f *Slack) OnCall(fn func(SlackCall)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.hook = fn
}

// NewSlack starts a fake Slack Web API, closed when the test ends.
func NewSlack(t Cleaner) *Slack {
	f := &Slack{groups: map[string][]string{}, fail: map[string]string{}, files: map[string][]byte{}, member: map[string]bool{}}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

// URL is the API base to configure as SLACK_API_URL.
func (f *Slack) URL() string { return f.srv.URL + "/api/" }

// SetGroup makes a user group with members (usergroups.users.list).
func (f *Slack) SetGroup(id string, members ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.groups[id] = members
}

// Fail makes method answer {"ok":false,"error":slackErr}; "" clears it.
func (f *Slack) Fail(method, slackErr string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fail[method] = slackErr
}

// SetSocketURL makes apps.connections.open answer {"ok":true,"url":wsURL},
// the Socket Mode WebSocket to dial; "" (the default) makes it answer
// unknown_method like any method the fake does not speak.
func (f *Slack) SetSocketURL(wsURL string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.wsURL = wsURL
}

// Calls returns the recorded calls of method ("" for all), in order.
func (f *Slack) Calls(method string) []SlackCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []SlackCall
	for _, c := range f.calls {
		if method == "" || c.Method == method {
			out = append(out, c)
		}
	}
	return out
}

// callParams reads a Web API call's arguments: the JSON or form body and the
// query, without the token.
func callParams(r *http.Request) map[string]string {
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
	}
	for k := range r.URL.Query() {
		params[k] = r.URL.Query().Get(k)
	}
	delete(params, "token")
	return params
}

func (f *Slack) serve(w http.ResponseWriter, r *http.Request) {
	method := strings.TrimPrefix(r.URL.Path, "/api/")
	if id, ok := strings.CutPrefix(method, uploadPath); ok {
		f.receiveUpload(w, r, id)
		return
	}
	params := callParams(r)
	if method == "files.getUploadURLExternal" {
		params["_base"] = "http://" + r.Host + "/api/"
	}
	f.mu.Lock()
	f.seq++
	ts := fmt.Sprintf("1700000000.%06d", f.seq)
	params["_ts"] = ts
	f.calls = append(f.calls, SlackCall{Method: method, Params: params})
	failWith := f.fail[method]
	members, known := f.groups[params["usergroup"]]
	if method == "chat.postMessage" && failWith == "" {
		m := map[string]any{"type": "message", "channel": params["channel"], "ts": ts, "text": params["text"]}
		if th := params["thread_ts"]; th != "" {
			m["thread_ts"] = th
		}
		var md map[string]any
		if json.Unmarshal([]byte(params["metadata"]), &md) == nil {
			m["metadata"] = md
		}
		f.msgs = append(f.msgs, m)
	}
	var found []map[string]any
	if method == "conversations.history" || method == "conversations.replies" {
		found = f.conversation(params)
	}
	seq := f.seq
	if f.skew != 0 {
		w.Header().Set("Date", time.Now().Add(f.skew).UTC().Format(http.TimeFormat))
	}
	if method == "auth.test" && f.scopes != "" {
		w.Header().Set("X-OAuth-Scopes", f.scopes)
	}
	if method == "conversations.info" {
		if m, ok := f.member[params["channel"]]; ok {
			params["_member"] = strconv.FormatBool(m)
		}
	}
	hook := f.hook
	wsURL := f.wsURL
	f.mu.Unlock()
	if hook != nil {
		hook(SlackCall{Method: method, Params: params})
	}

	w.Header().Set("Content-Type", "application/json")
	if failWith != "" {
		fmt.Fprintf(w, `{"ok":false,"error":%q}`, failWith)
		return
	}
	_ = json.NewEncoder(w).Encode(call{method, params, ts, seq, found, members, known, wsURL}.answer())
}

// call is one Web API call and what the fake knew when it came.
type call struct {
	method  string
	params  map[string]string
	ts      string           // the timestamp of a message it posts
	seq     int              // its number
	found   []map[string]any // the messages conversations.* return
	members []string         // the users of params["usergroup"], when known
	known   bool
	wsURL   string // the Socket Mode URL, if any
}

// answer is the Web API's answer to a call that did not fail.
func (c call) answer() any {
	var resp any
	switch c.method {
	case "auth.test":
		resp = map[string]any{"ok": true, "user_id": "UBOT", "bot_id": "BBOT", "team_id": "T0TEAM", "user": "relay", "team": "Test Team"}
	case "chat.postMessage":
		resp = map[string]any{"ok": true, "channel": c.params["channel"], "ts": c.ts,
			"message": map[string]any{"type": "message", "ts": c.ts, "text": c.params["text"]}}
	case "chat.update":
		resp = map[string]any{"ok": true, "channel": c.params["channel"], "ts": c.params["ts"], "text": c.params["text"]}
	case "files.getUploadURLExternal":
		id := fmt.Sprintf("F%06d", c.seq)
		resp = map[string]any{"ok": true, "file_id": id, "upload_url": c.params["_base"] + uploadPath + id}
	case "files.completeUploadExternal":
		var files []map[string]any
		_ = json.Unmarshal([]byte(c.params["files"]), &files)
		resp = map[string]any{"ok": true, "files": files}
	case "chat.postEphemeral":
		resp = map[string]any{"ok": true, "message_ts": c.ts}
	case "views.open", "views.update", "views.push":
		resp = map[string]any{"ok": true, "view": map[string]any{"id": fmt.Sprintf("V%06d", c.seq), "type": "modal"}}
	case "conversations.history", "conversations.replies":
		resp = map[string]any{"ok": true, "messages": c.found, "has_more": false}
	case "conversations.info":
		if c.params["_member"] == "" {
			resp = map[string]any{"ok": false, "error": "channel_not_found"}
		} else {
			resp = map[string]any{"ok": true, "channel": map[string]any{"id": c.params["channel"], "name": "approvals", "is_member": c.params["_member"] == "true"}}
		}
	case "usergroups.users.list":
		if !c.known {
			resp = map[string]any{"ok": false, "error": "no_such_subteam"}
		} else {
			resp = map[string]any{"ok": true, "users": c.members}
		}
	case "apps.connections.open":
		if c.wsURL == "" {
			resp = map[string]any{"ok": false, "error": "unknown_method"}
		} else {
			resp = map[string]any{"ok": true, "url": c.wsURL}
		}
	default:
		resp = map[string]any{"ok": false, "error": "unknown_method"}
	}
	return resp
}

// conversation answers conversations.history (the channel's messages, newest
// first) and conversations.replies (a thread, oldest first), with their
// metadata. "oldest" is ignored (the fake's ts count calls, they are not
// times) and everything is one page.
// The caller holds f.mu.
func (f *Slack) conversation(params map[string]string) []map[string]any {
	out := []map[string]any{}
	for _, m := range f.msgs {
		ts, _ := m["ts"].(string)
		th, _ := m["thread_ts"].(string)
		if m["channel"] != params["channel"] {
			continue
		}
		if thread := params["ts"]; thread != "" {
			if ts == thread || th == thread {
				out = append(out, m)
			}
		} else if th == "" || th == ts {
			out = append([]map[string]any{m}, out...)
		}
	}
	return out
}

// Action is a button found in a posted message's blocks.
type Action struct {
	ActionID, Value, BlockID string
}

// Actions returns the buttons of a chat.postMessage or chat.update call.
func (c SlackCall) Actions() []Action {
	var blocks []struct {
		Type     string `json:"type"`
		BlockID  string `json:"block_id"`
		Elements []struct {
			Type     string `json:"type"`
			ActionID string `json:"action_id"`
			Value    string `json:"value"`
		} `json:"elements"`
	}
	_ = json.Unmarshal([]byte(c.Params["blocks"]), &blocks)
	var out []Action
	for _, b := range blocks {
		if b.Type != "actions" {
			continue
		}
		for _, e := range b.Elements {
			if e.Type == "button" {
				out = append(out, Action{ActionID: e.ActionID, Value: e.Value, BlockID: b.BlockID})
			}
		}
	}
	return out
}

// BlockActions is a block_actions interaction payload: user clicks a on the
// message ts in channel.
func BlockActions(team, user, channel, messageTS, triggerID string, a Action) []byte {
	p := map[string]any{
		"type":         "block_actions",
		"user":         map[string]any{"id": user, "username": "user-" + user, "team_id": team},
		"api_app_id":   "A0APP01",
		"token":        "verification-token-unused",
		"container":    map[string]any{"type": "message", "message_ts": messageTS, "channel_id": channel, "is_ephemeral": false},
		"trigger_id":   triggerID,
		"team":         map[string]any{"id": team, "domain": "acme"},
		"channel":      map[string]any{"id": channel, "name": "approvals"},
		"message":      map[string]any{"type": "message", "ts": messageTS, "text": "Approval needed", "bot_id": "BBOT"},
		"state":        map[string]any{"values": map[string]any{}},
		"response_url": "https://hooks.slack.com/actions/" + team + "/1/x",
		"actions": []any{map[string]any{
			"action_id": a.ActionID, "block_id": a.BlockID, "value": a.Value, "type": "button",
			"text": map[string]any{"type": "plain_text", "text": a.ActionID}, "action_ts": "1700000250.1",
		}},
	}
	b, _ := json.Marshal(p)
	return b
}

// ViewSubmission is a view_submission payload for the modal opened with view
// (the views.open call's "view" parameter): values maps block id -> action id
// -> value of a plain_text_input.
func ViewSubmission(team, user, triggerID string, view SlackCall, values map[string]map[string]string) []byte {
	var v struct {
		CallbackID      string `json:"callback_id"`
		PrivateMetadata string `json:"private_metadata"`
	}
	_ = json.Unmarshal([]byte(view.Params["view"]), &v)
	state := map[string]any{}
	for block, actions := range values {
		m := map[string]any{}
		for action, val := range actions {
			m[action] = map[string]any{"type": "plain_text_input", "value": val}
		}
		state[block] = m
	}
	p := map[string]any{
		"type":       "view_submission",
		"team":       map[string]any{"id": team, "domain": "acme"},
		"user":       map[string]any{"id": user, "username": "user-" + user, "team_id": team},
		"api_app_id": "A0APP01",
		"trigger_id": triggerID,
		"view": map[string]any{
			"id": "V0VIEW01", "team_id": team, "type": "modal", "callback_id": v.CallbackID,
			"private_metadata": v.PrivateMetadata, "hash": "1700000301.x", "root_view_id": "V0VIEW01",
			"state": map[string]any{"values": state},
		},
	}
	b, _ := json.Marshal(p)
	return b
}

// FormPayload wraps an interaction payload as Slack posts it: payload=<json>.
func FormPayload(payload []byte) []byte {
	return []byte("payload=" + url.QueryEscape(string(payload)))
}

// uploadPath is where the fake's upload URLs point, under the API base (the
// client sends its token only there).
const uploadPath = "upload/"

// receiveUpload stores the "file" part of an upload to an upload URL.
func (f *Slack) receiveUpload(w http.ResponseWriter, r *http.Request, id string) {
	file, _, err := r.FormFile("file")
	if err != nil {
		http.Error(w, "no file part: "+err.Error(), http.StatusBadRequest)
		return
	}
	data, err := io.ReadAll(file)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	f.mu.Lock()
	f.files[id] = data
	f.mu.Unlock()
	fmt.Fprintf(w, "OK - %d", len(data))
}

// Upload is a file uploaded and shared (files.completeUploadExternal).
type Upload struct {
	ID, Title, Channel, ThreadTS string
	Data                         []byte
}

// Uploads returns the files uploaded and completed, in order.
func (f *Slack) Uploads() []Upload {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []Upload
	for _, c := range f.calls {
		if c.Method != "files.completeUploadExternal" {
			continue
		}
		var files []struct{ ID, Title string }
		_ = json.Unmarshal([]byte(c.Params["files"]), &files)
		for _, fl := range files {
			out = append(out, Upload{ID: fl.ID, Title: fl.Title, Channel: c.Params["channel_id"], ThreadTS: c.Params["thread_ts"], Data: f.files[fl.ID]})
		}
	}
	return out
}
