package agent

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/relaystation/relay/envelope"
)

func FuzzContentToolCalls(f *testing.F) {
	for _, s := range []string{
		"The fix is in PR #7.",
		`{"name": "retrieve_docs", "arguments": {"query": "x"}}`,
		`{"name": "retrieve_docs", "arguments": "{\"query\": \"x\"}"}`,
		`{"tool_calls": [{"function": {"name": "retrieve_docs", "arguments": {}}}]}`,
		"```json\n[{\"name\": \"retrieve_docs\"}]\n```",
		"<tool_call>{\"name\": \"retrieve_docs\", \"parameters\": {\"query\": 1}}</tool_call>",
		`[[[[{"name": "retrieve_docs"}]]]]`,
		`{"function": {"function": {"function": {"name": "retrieve_docs"}}}}`,
	} {
		f.Add(s)
	}
	known := func(n string) bool { return n == "retrieve_docs" }
	f.Fuzz(func(t *testing.T, s string) {
		for _, c := range ContentToolCalls(s, known) {
			if c.Name != "retrieve_docs" {
				t.Fatalf("got call of unknown tool %q", c.Name)
			}
			args, err := ParseArgs(c.Arguments)
			if err != nil || args == nil {
				t.Fatalf("got arguments %q that are no JSON object: %v", c.Arguments, err)
			}
		}
	})
}

func FuzzCitedRefs(f *testing.F) {
	for _, s := range []string{"See [[ref:doc-1]] and [[ref:mem-2]].", "[[ref:]]", "[[ref:a]][[ref:a]]", "[[ref:" + strings.Repeat("x", 300) + "]]"} {
		f.Add(s, "doc-1")
	}
	f.Fuzz(func(t *testing.T, answer, given string) {
		cited := CitedRefs(answer)
		seen := map[string]bool{}
		for _, c := range cited {
			if seen[c] || c == "" || !strings.Contains(answer, "[[ref:"+c+"]]") {
				t.Fatalf("got cited %q (duplicate, empty or not in the answer)", c)
			}
			seen[c] = true
		}
		for _, u := range UnknownRefs(answer, []string{given}) {
			if u == given || !seen[u] {
				t.Fatalf("got unknown %q, which was given or never cited", u)
			}
		}
	})
}

func FuzzParseArgs(f *testing.F) {
	for _, s := range []string{"", "null", "{}", `{"a": 1}`, "[1]", `"x"`, "{"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		m, err := ParseArgs(s)
		if err != nil {
			return
		}
		if m == nil {
			t.Fatal("got nil map without error")
		}
		if _, err := json.Marshal(m); err != nil {
			t.Fatalf("arguments do not marshal: %v", err)
		}
	})
}

// FuzzTargetOf feeds thread keys and provider meta to TargetOf: whatever it
// returns must be a valid target.
func FuzzTargetOf(f *testing.F) {
	f.Add("github", "github:Codertocat/Hello-World#1", "", "")
	f.Add("slack", "slack:T1/C1/1700000000.000100", "C1", "1700000000.000100")
	f.Add("sentry", "sentry:org/123", "", "")
	f.Add("openproject", "openproject:host/work_packages/9", "", "")
	f.Add("github", "github:a/b#-1", "", "")
	f.Fuzz(func(t *testing.T, ch, thread, slackCh, ts string) {
		e := envelope.New(envelope.Channel(ch), envelope.RoleUser, "x")
		e.Meta.Thread = thread
		e.Meta.Set("slack", map[string]any{"channel": slackCh, "ts": ts})
		tg, err := envelope.TargetOf(e)
		if err != nil {
			return
		}
		if verr := tg.Validate(); verr != nil {
			t.Fatalf("got invalid target %+v: %v", tg, verr)
		}
	})
}
