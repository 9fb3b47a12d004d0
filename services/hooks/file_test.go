package hooks

import (
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/relaystation/relay/envelope"
	"github.com/relaystation/relay/internal/testenv"
	"github.com/relaystation/relay/tools"
)

// TestInvalidFilesRefused: every refused file names the hook, the action
// and the field of each problem.
func TestInvalidFilesRefused(t *testing.T) {
	t.Parallel()
	const head = "hooks:\n  - name: h1\n    on: [github.issues.opened]\n"
	const act = "    actions:\n      - type: mcp\n        parameters:\n          serverId: s\n          toolName: t\n"
	cases := []struct {
		name, file string
		want       []string
	}{
		{"bad name", "hooks:\n  - name: 'bad name'\n    on: [github.issues]\n" + act, []string{`hook "bad name": name:`}},
		{"duplicate name", head + act + "  - name: h1\n    on: [github.issues]\n" + act, []string{`hook "h1": name: duplicate hook name`}},
		{"bad trigger channel", "hooks:\n  - name: h1\n    on: [gitlab.push]\n" + act, []string{`hook "h1": on[0]: bad trigger "gitlab.push"`}},
		{"bad condition", "hooks:\n  - name: h1\n    on: [github.issues]\n    if: 'repo =='\n" + act, []string{`hook "h1": if: bad condition`}},
		{"unknown variable", "hooks:\n  - name: h1\n    on: [github.issues]\n    if: 'colour == \"red\"'\n" + act, []string{`unknown variable "colour"`}},
		{"timeout too short", head + act + "          timeout: 10\n", []string{`hook "h1": action 1: parameters.timeout:`}},
		{"timeout too long", head + act + "          timeout: 300001\n", []string{`hook "h1": action 1: parameters.timeout:`}},
		{"unknown field", head + act + "          retries: 3\n", []string{`hook "h1": action 1: parameters:`, "retries"}},
		{"unknown hook field", head + "    colour: red\n" + act, []string{`hook "h1": `, "colour"}},
		{"duplicate toolParam", head + act + "          parameterMappings:\n            - {toolParam: m, source: literal, value: a}\n            - {toolParam: m, source: literal, value: b}\n",
			[]string{`hook "h1": action 1: parameters.parameterMappings[1].toolParam: "m" is mapped twice`}},
		{"bad source", head + act + "          parameterMappings:\n            - {toolParam: m, source: env, value: a}\n", []string{`hook "h1": action 1: parameters.parameterMappings[0].source:`}},
		{"unknown context variable", head + act + "          parameterMappings:\n            - {toolParam: m, source: context, value: colour}\n",
			[]string{`hook "h1": action 1: parameters.parameterMappings[0].value: "colour" is not a context variable`}},
		{"bad template", head + act + "          parameterMappings:\n            - {toolParam: m, source: template, value: '{{.actor'}\n",
			[]string{`hook "h1": action 1: parameters.parameterMappings[0].value: template:`}},
		{"second action", head + act + "      - type: shell\n        parameters: {serverId: s, toolName: t}\n", []string{`hook "h1": action 2: type:`}},
		{"not yaml", "hooks: [", []string{"not YAML or JSON"}},
		{"parentheses 2,000,000 deep", "hooks:\n  - name: h1\n    on: [github.issues]\n    if: '" + strings.Repeat("(", 2_000_000) + "true" + strings.Repeat(")", 2_000_000) + "'\n" + act,
			[]string{`hook "h1": if: bad condition`, "nested more than 64 levels deep"}},
		{"negations 2,000,000 deep", "hooks:\n  - name: h1\n    on: [github.issues]\n    if: '" + strings.Repeat("!", 2_000_000) + "true'\n" + act,
			[]string{`hook "h1": if: bad condition`, "nested more than 64 levels deep"}},
		{"lists 2,000,000 deep", "hooks:\n  - name: h1\n    on: [github.issues]\n    if: 'repo in " + strings.Repeat("[", 2_000_000) + "'\n" + act,
			[]string{`hook "h1": if: bad condition`, "nested more than 64 levels deep"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := Parse([]byte(tc.file), "hooks.yaml")
			if _, ok := errors.AsType[*ValidationError](err); !ok {
				t.Fatalf("got %v, want a *ValidationError", err)
			}
			testenv.ErrorNames(t, err, tc.want...)
		})
	}
}

func TestValidFileJSONAndYAML(t *testing.T) {
	t.Parallel()
	for name, src := range map[string]string{
		"yaml": "hooks:\n  - name: a\n    on: [sentry.issue.created]\n    actions:\n      - type: mcp\n        parameters: {serverId: s, toolName: t, timeout: 1000}\n",
		"json": `{"hooks": [{"name": "a", "on": ["sentry.issue.created"], "actions": [{"type": "mcp", "parameters": {"serverId": "s", "toolName": "t", "timeout": 1000}}]}]}`,
	} {
		f, err := Parse([]byte(src), name)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if h := f.Hook("a"); h == nil || h.Role != DefaultRole || h.Actions[0].Parameters.Tool() != "s.t" {
			t.Errorf("%s: got %+v, want hook a with role hooks calling s.t", name, h)
		}
	}
	if f, err := Parse(nil, "empty"); err != nil || len(f.Hooks) != 0 {
		t.Errorf("empty file: got %v, %v; want no hooks", f, err)
	}
}

// parseActions parses a file of one hook, "h" on github.issues, whose
// actions are the YAML list actions.
func parseActions(t *testing.T, actions string) *File {
	t.Helper()
	f, err := Parse([]byte("hooks:\n  - name: h\n    on: [github.issues]\n    actions:"+actions), "h.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// TestCheckAgainstTools: server, tool and required parameters, and a
// warning for a server whose tools are unknown.
func TestCheckAgainstTools(t *testing.T) {
	t.Parallel()
	f := parseActions(t, `
      - type: mcp
        parameters: {serverId: ev, toolName: get-sum, parameterMappings: [{toolParam: a, source: literal, value: 1}, {toolParam: c, source: literal, value: 1}]}
      - type: mcp
        parameters: {serverId: ev, toolName: nope}
      - type: mcp
        parameters: {serverId: missing, toolName: x}
      - type: mcp
        parameters: {serverId: later, toolName: x}
`)
	sum := tools.ToolInfo{Name: "ev.get-sum", InputSchema: map[string]any{"type": "object", "required": []any{"a", "b"},
		"properties": map[string]any{"a": map[string]any{"type": "number"}, "b": map[string]any{"type": "number"}}}}
	probs := f.Check(Catalog{Servers: []string{"ev", "later"}, Tools: map[string]map[string]tools.ToolInfo{"hooks": {"ev.get-sum": sum}},
		Reachable: map[string]bool{"ev": true}})
	var got []string
	for _, p := range probs {
		got = append(got, p.String())
	}
	all := strings.Join(got, "\n")
	for _, w := range []string{
		`hook "h": action 1: parameters.parameterMappings: required parameter "b" of ev.get-sum is not mapped`,
		`hook "h": action 1: parameters.parameterMappings[1].toolParam: ev.get-sum has no parameter "c"`,
		`hook "h": action 2: parameters.toolName: server "ev" has no tool "nope" that role "hooks" may call`,
		`hook "h": action 3: parameters.serverId: server "missing" is not in mcp.json`,
		`hook "h": action 4: parameters.toolName: server "later" is not reachable yet`,
	} {
		if !strings.Contains(all, w) {
			t.Errorf("got\n%s\nwant a line containing %q", all, w)
		}
	}
	if n := len(Errors(probs)); n != 4 {
		t.Errorf("errors: got %d, want 4 (the unreachable server is a warning)", n)
	}
}

func TestConditions(t *testing.T) {
	t.Parallel()
	c := Context{"repository": "octo-org/api", "number": 7, "labels": []any{"bug", "incident"}, "title": "Crash on start", "action": "opened", "event": "issues"}
	cases := []struct {
		expr string
		want bool
	}{
		{`repository == "octo-org/api"`, true},
		{`repository != 'octo-org/api'`, false},
		{`number == 7 && action == "opened"`, true},
		{`number == "7"`, true},
		{`"incident" in labels`, true},
		{`"wontfix" in labels`, false},
		{`"wontfix" not in labels`, true},
		{`"Crash" in title`, true},
		{`action in ["opened", "reopened"] && !(event == "pull_request")`, true},
		{`branch == ""`, true},
		{`branch`, false},
		{`labels`, true},
		{`event == "push" || number == 7`, true},
		{`!true || false`, false},
	}
	for _, tc := range cases {
		x, err := Compile(tc.expr)
		if err != nil {
			t.Errorf("%s: %v", tc.expr, err)
			continue
		}
		if got := x.Eval(c); got != tc.want {
			t.Errorf("%s: got %v, want %v", tc.expr, got, tc.want)
		}
	}
	for _, bad := range []string{`repo ==`, `(number == 1`, `"a" in`, `number = 1`, `"unterminated`, `x == 1`, `[1, 2`, `number == 1 number`} {
		if _, err := Compile(bad); !errors.Is(err, ErrBadExpr) {
			t.Errorf("%s: got %v, want ErrBadExpr", bad, err)
		}
	}
}

func FuzzCompile(f *testing.F) {
	for _, s := range []string{`repository == "a" && "x" in labels`, `!(a || b)`, `[1, 'x'] `, `not in`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		x, err := Compile(s)
		if err == nil {
			x.Eval(Context{"labels": []any{"x"}})
		}
	})
}

// TestContextDerivesFacts: the facts each provider's thread and meta give.
func TestContextDerivesFacts(t *testing.T) {
	t.Parallel()
	gh := envelope.New(envelope.ChannelGitHub, envelope.RoleUser, "x")
	gh.Meta.Thread = "github:octo-org/api#12"
	gh.Meta.Source = &envelope.Source{Event: "issues", Action: "labeled", Actor: "mona", URL: "https://github.com/octo-org/api/issues/12"}
	gh.Meta.Set("facts", map[string]any{"labels": []any{"incident"}, "title": "Down"})
	c := NewContext(gh)
	if c["repository"] != "octo-org/api" || c["number"] != 12 || c["actor"] != "mona" || c["title"] != "Down" || c["event"] != "issues" {
		t.Errorf("github: got %v", c)
	}
	if c["timestamp"] != gh.Timestamp.Format(time.RFC3339) {
		t.Errorf("timestamp: got %v", c["timestamp"])
	}
	se := envelope.New(envelope.ChannelSentry, envelope.RoleUser, "x")
	se.Meta.Thread = "sentry:acme/42"
	se.Meta.Set("sentry", map[string]any{"project": "web", "level": "error", "culprit": "app.views"})
	c = NewContext(se)
	if c["org"] != "acme" || c["issue_id"] != "42" || c["project"] != "web" || c["level"] != "error" || c["culprit"] != "app.views" {
		t.Errorf("sentry: got %v", c)
	}
	op := envelope.New(envelope.ChannelOpenProject, envelope.RoleUser, "x")
	op.Meta.Thread = "openproject:op.example.com/work_packages/9"
	op.Meta.Set("openproject", map[string]any{"project": "infra", "type": "Bug", "status": "New"})
	c = NewContext(op)
	if c["host"] != "op.example.com" || c["work_package_id"] != 9 || c["type"] != "Bug" || c["status"] != "New" {
		t.Errorf("openproject: got %v", c)
	}
}

func TestResolve(t *testing.T) {
	t.Parallel()
	f := parseActions(t, `
      - type: mcp
        parameters:
          serverId: s
          toolName: t
          parameterMappings:
            - {toolParam: n, source: literal, value: "12"}
            - {toolParam: flag, source: literal, value: "true"}
            - {toolParam: raw, source: literal, value: 3}
            - {toolParam: who, source: context, value: actor}
            - {toolParam: msg, source: template, value: "{{.actor}} on {{.repository}}"}
`)
	schema := map[string]any{"properties": map[string]any{"n": map[string]any{"type": "integer"}, "flag": map[string]any{"type": "boolean"}}}
	act := &f.Hooks[0].Actions[0]
	args, err := act.Resolve(Context{"actor": "mona", "repository": "o/r"}, schema)
	if err != nil {
		t.Fatal(err)
	}
	if args["n"] != int64(12) || args["flag"] != true || args["raw"] != float64(3) || args["who"] != "mona" || args["msg"] != "mona on o/r" {
		t.Errorf("got %#v", args)
	}
	// A template's missing key and a context variable the envelope lacks are errors.
	if _, err := act.Resolve(Context{"actor": "mona"}, schema); !errors.Is(err, ErrResolve) || !strings.Contains(err.Error(), "msg") {
		t.Errorf("missing key: got %v, want ErrResolve naming msg", err)
	}
	if _, err := act.Resolve(Context{"repository": "o/r"}, schema); err == nil || !strings.Contains(err.Error(), `"actor" is not set`) {
		t.Errorf("missing context variable: got %v", err)
	}
}

// TestContextFromGoldenEnvelopes: the facts of the mappers' own golden
// envelopes (real Sentry and OpenProject payloads) reach the context.
func TestContextFromGoldenEnvelopes(t *testing.T) {
	t.Parallel()
	cases := []struct {
		file string
		want map[string]any
	}{
		{"../../mappers/sentry/testdata/golden/issue.created.json", map[string]any{"org": "test-org", "issue_id": "1170820242",
			"project": "front-end", "level": "error", "title": "ReferenceError: blooopy is not defined", "status": "unresolved", "event": "issue", "action": "created"}},
		{"../../mappers/openproject/testdata/golden/work_package.created.json", map[string]any{"host": "openproject.example.com",
			"work_package_id": 1528, "project": "A Test Project", "type": "Task", "status": "New", "title": "Develop API"}},
		{"../../mappers/github/testdata/golden/issues.opened.json", map[string]any{"repository": "Codertocat/Hello-World", "number": 1,
			"actor": "Codertocat", "event": "issues", "action": "opened"}},
		{"../../mappers/sentry/testdata/golden/error.created.json", map[string]any{"level": "error", "culprit": "?(runner)",
			"issue_id": "1170820242", "title": "ReferenceError: blooopy is not defined"}},
		{"../../mappers/github/testdata/golden/pull_request.opened.json", map[string]any{"repository": "Codertocat/Hello-World", "number": 2,
			"title": "Update the README with new information.", "state": "open", "branch": "changes", "base": "master",
			"sha": "ec26c3e57ca3a959ca5aad62de7213c562f8c821"}},
		{"../../mappers/github/testdata/golden/push.0.json", map[string]any{"repository": "Codertocat/Hello-World",
			"ref": "refs/tags/simple-tag", "tag": "simple-tag", "sha": "6113728f27ae82c7b1a177c8d03f9e96e0adf246"}},
	}
	for _, tc := range cases {
		raw := testenv.ReadFile(t, tc.file)
		var g struct {
			Envelope json.RawMessage `json:"envelope"`
			Items    []struct {
				Envelope json.RawMessage `json:"envelope"`
			} `json:"items"`
		}
		if err := json.Unmarshal(raw, &g); err != nil {
			t.Fatal(err)
		}
		if len(g.Items) > 0 {
			g.Envelope = g.Items[0].Envelope
		}
		e, err := envelope.Parse(g.Envelope)
		if err != nil {
			t.Fatalf("%s: %v", tc.file, err)
		}
		c := NewContext(e)
		for k, v := range tc.want {
			if c[k] != v {
				t.Errorf("%s: %s: got %#v, want %#v", filepath.Base(tc.file), k, c[k], v)
			}
		}
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte("hooks:\n  - name: a\n    on: [github.issues.opened]\n    if: 'actor == \"x\"'\n    actions:\n      - type: mcp\n        parameters: {serverId: s, toolName: t, parameterMappings: [{toolParam: m, source: template, value: '{{.actor}}'}]}\n"))
	f.Add([]byte(`{"hooks": [{"name": "b", "on": ["sentry.issue"], "actions": [{"type": "mcp", "parameters": {"serverId": "s", "toolName": "t", "timeout": 1000}}]}]}`))
	f.Add([]byte("hooks: [{name: c}]"))
	f.Fuzz(func(t *testing.T, data []byte) {
		file, err := Parse(data, "fuzz")
		if err != nil {
			if ve, ok := errors.AsType[*ValidationError](err); !ok || len(ve.Problems) == 0 {
				t.Fatalf("got %v, want a *ValidationError with problems", err)
			}
			return
		}
		e := envelope.New(envelope.ChannelGitHub, envelope.RoleUser, "x")
		e.Meta.Source = &envelope.Source{Event: "issues", Action: "opened"}
		matched, c := file.Match(e)
		for _, h := range matched {
			for i := range h.Actions {
				_, _ = h.Actions[i].Resolve(c, nil)
			}
		}
	})
}

// TestContextBot: bot is true for messages bots wrote (a GitHub Bot sender,
// a Slack bot message, the relay's own Slack posts among them), so a
// condition can leave them alone.
func TestContextBot(t *testing.T) {
	t.Parallel()
	notBot, err := Compile("!bot")
	if err != nil {
		t.Fatal(err)
	}
	slackBot := envelope.New(envelope.ChannelSlack, envelope.RoleUser, "echo: hi")
	slackBot.Meta.Set("slack", map[string]any{"bot": true, "team": "T1"})
	ghBot := envelope.New(envelope.ChannelGitHub, envelope.RoleUser, "x")
	ghBot.Meta.Set("bot", true)
	person := envelope.New(envelope.ChannelSlack, envelope.RoleUser, "hi")
	person.Meta.Set("slack", map[string]any{"bot": false, "user": "U1"})
	for _, tc := range []struct {
		name string
		e    *envelope.Envelope
		bot  bool
	}{{"slack bot", slackBot, true}, {"github bot", ghBot, true}, {"person", person, false}} {
		c := NewContext(tc.e)
		if c["bot"] != tc.bot || notBot.Eval(c) == tc.bot {
			t.Errorf("%s: got bot %v, !bot %v; want bot %v", tc.name, c["bot"], notBot.Eval(c), tc.bot)
		}
	}
}
