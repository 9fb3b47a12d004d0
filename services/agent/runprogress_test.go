package agent

import (
	"strings"
	"testing"

	"github.com/slack-go/slack"

	"github.com/relaystation/relay/bus/bustest"
	"github.com/relaystation/relay/envelope"
	"github.com/relaystation/relay/internal/fakes"
)

const taskRunPolicy = `
roles:
  - role: agent
    capabilities: ["*.*"]
  - role: oncall
    capabilities: ["everything.*"]
    members:
      slack: [U0ONCALL]
bindings:
  - slack: {team: T0ACME}
    servers: [everything]
    inheritToChildren: true
`

// TestCodeBlockTaskProgress: a code-block run of a tool that runs as an
// MCP task (server-everything's simulate-research-query) shows the task's
// statuses in its running message, and the result replaces it last.
func TestCodeBlockTaskProgress(t *testing.T) {
	t.Parallel()
	b := bustest.Embedded(t)
	pol := startToolRunner(t, b, taskRunPolicy, "everything")
	fs := fakes.NewSlack(t)
	h := &runHarness{slack: fs, out: bustest.Observe(t, b, "test-runs-out", "out.>")}
	h.harness = setup(t, []reply{say("no model answer was expected")}, withBus(b), withConfig(func(c *Config) {
		c.Policy = pol
		c.Slack = slack.New("xoxb-test", slack.OptionAPIURL(fs.URL()))
	}))
	h.publish(t, "in.slack.app_mention", slackMessage("app_mention", "C0DEV", "U0ONCALL",
		"<@UBOT> ```everything\ntool: simulate-research-query\ntopic: relays\n```"))
	var texts []string
	for {
		p := h.nextPost(t)
		texts = append(texts, p.Content)
		if strings.Contains(p.Content, "Research Report: relays") {
			break
		}
		if !strings.Contains(p.Content, "Running `everything.simulate-research-query`") {
			t.Fatalf("got update %q before the result, want a status of the running message", p.Content)
		}
	}
	if all := strings.Join(texts, "|"); !strings.Contains(all, "> Gathering sources") {
		t.Errorf("updates %q show no status of the task", all)
	}
	h.drained(t, ConsumerProgress, envelope.SubjectToolProgress)
	ups := fs.Calls("chat.update")
	if last := ups[len(ups)-1].Params["text"]; !strings.Contains(last, "Research Report: relays") {
		t.Fatalf("the last update of the running message is %q, want the result", last)
	}
}
