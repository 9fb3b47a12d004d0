package hooks

import (
	"fmt"
	"strings"
	"testing"

	"github.com/relaystation/relay/envelope"
)

// BenchmarkMatchResolve is the per-envelope cost with 100 hooks configured:
// matching every hook (triggers, then conditions) and resolving the
// parameters of the matching hooks' actions. 10 of the 100 hooks match the
// envelope; each has a template, a context and a literal mapping.
func BenchmarkMatchResolve(b *testing.B) {
	var sb strings.Builder
	sb.WriteString("hooks:\n")
	for i := range 100 {
		on, cond := "github.pull_request.opened", `branch == "main"`
		switch {
		case i%10 == 0:
			on, cond = "github.issues.opened", `repository == "Codertocat/Hello-World" && actor in ["Codertocat", "mona"]`
		case i%3 == 0:
			on, cond = "github.issues.opened", `repository == "other/repo"`
		}
		fmt.Fprintf(&sb, `  - name: hook-%d
    on: [%q, "sentry.issue.created"]
    if: '%s'
    actions:
      - type: mcp
        parameters:
          serverId: everything
          toolName: echo
          parameterMappings:
            - {toolParam: message, source: template, value: "{{.actor}} opened {{.url}} in {{.repository}}#{{.number}}"}
            - {toolParam: who, source: context, value: actor}
            - {toolParam: n, source: literal, value: "%d"}
`, i, on, cond, i)
	}
	f, err := Parse([]byte(sb.String()), "bench.yaml")
	if err != nil {
		b.Fatal(err)
	}
	schema := map[string]any{"type": "object", "properties": map[string]any{"message": map[string]any{"type": "string"}, "n": map[string]any{"type": "integer"}}}
	e := envelope.New(envelope.ChannelGitHub, envelope.RoleUser, "Codertocat opened issue #1")
	e.Meta.Thread = "github:Codertocat/Hello-World#1"
	e.Meta.Source = &envelope.Source{Event: "issues", Action: "opened", Actor: "Codertocat", URL: "https://github.com/Codertocat/Hello-World/issues/1", DeliveryID: "d"}
	b.ReportAllocs()
	for b.Loop() {
		matched, c := f.Match(e)
		if len(matched) != 10 {
			b.Fatalf("matched %d hooks, want 10", len(matched))
		}
		for _, h := range matched {
			if _, err := h.Actions[0].Resolve(c, schema); err != nil {
				b.Fatal(err)
			}
		}
	}
}
