package agent

import (
	"bytes"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/slack-go/slack"

	"github.com/relaystation/relay/bus"
	"github.com/relaystation/relay/bus/bustest"
	"github.com/relaystation/relay/envelope"
	"github.com/relaystation/relay/internal/fakes"
	"github.com/relaystation/relay/internal/testenv"
	slackmapper "github.com/relaystation/relay/mappers/slack"
	"github.com/relaystation/relay/services/toolrunner"
	"github.com/relaystation/relay/tools"
	"github.com/relaystation/relay/tools/mcpconfig"
	"github.com/relaystation/relay/tools/toolstest"
)

// runPolicy gives the agent every tool, the oncall role (its members: a
// Slack user, a Slack user group, a GitHub login) the read-only tools of
// everything, and binds the workspace (inherited) to everything and the
// channel C0OPS to other.
const runPolicy = `
roles:
  - role: agent
    capabilities: ["*.*"]
  - role: oncall
    capabilities: ["everything.read"]
    members:
      slack: [U0ONCALL, S0ONCALLGRP]
      github: [octocat]
bindings:
  - slack: {team: T0ACME}
    servers: [everything]
    inheritToChildren: true
  - slack: {channel: C0OPS}
    servers: [other]
  - github: {org: octo-org}
    servers: [everything]
    inheritToChildren: true
`

// runHarness is an agent with code-block runs on, the real tool runner with
// two mcp-server-everything servers (everything, other), the fake Slack API
// and observers of out.> and audit.tool.
type runHarness struct {
	*harness
	slack *fakes.Slack
	out   <-chan *envelope.Envelope
	audit <-chan *envelope.Envelope
	// updates counts the chat.update calls nextPost has returned.
	updates int
}

func setupRuns(t *testing.T, script ...reply) *runHarness {
	t.Helper()
	b := bustest.Embedded(t)
	pol := startToolRunner(t, b, runPolicy, "everything", "other")
	fs := fakes.NewSlack(t)
	fs.SetGroup("S0ONCALLGRP", "U0INGROUP")
	rh := &runHarness{slack: fs,
		out:   bustest.Observe(t, b, "test-runs-out", "out.>"),
		audit: bustest.Observe(t, b, "test-runs-audit", toolrunner.SubjectAudit)}
	if len(script) == 0 {
		script = []reply{say("no model answer was expected")}
	}
	rh.harness = setup(t, script, withBus(b), withConfig(func(c *Config) {
		c.Policy = pol
		c.Slack = slack.New("xoxb-test", slack.OptionAPIURL(fs.URL()))
		c.LongOutput = 500
	}))
	return rh
}

// nextPost returns the next answer to a run: an envelope on out.>, or a
// chat.update of a running message (as an envelope with its Slack target:
// the running message's channel and thread).
func (h *runHarness) nextPost(t *testing.T) *envelope.Envelope {
	t.Helper()
	var got *envelope.Envelope
	testenv.WaitFor(t, 30*time.Second, "an answer on out.> or a chat.update", func() bool {
		select {
		case got = <-h.out:
			return true
		default:
		}
		ups := h.slack.Calls("chat.update")
		if len(ups) == h.updates {
			return false
		}
		up := ups[h.updates]
		h.updates++
		got = envelope.New(envelope.ChannelSlack, envelope.RoleAssistant, up.Params["text"])
		tg := &envelope.Target{Channel: "slack", SlackCh: up.Params["channel"], ThreadTS: "(running message not found)"}
		for _, p := range h.slack.Calls("chat.postMessage") {
			if p.Params["_ts"] == up.Params["ts"] {
				tg.ThreadTS = p.Params["thread_ts"]
				wantParts(t, p.Params["blocks"], []string{slackmapper.ActionCancelRun, runCallIDFromBlocks(p.Params["blocks"])})
			}
		}
		got.Meta.SetTarget(tg)
		return true
	})
	return got
}

// startToolRunner runs the real tool runner on b under the policy, with one
// mcp-server-everything (stdio) per name, and waits until all are ready.
func startToolRunner(t *testing.T, b *bus.Bus, policy string, names ...string) *mcpconfig.Policy {
	t.Helper()
	bin := testenv.NPMBin(t, "mcp-server-everything")
	pol := toolstest.Policy(t, policy)
	var servers []mcpconfig.Server
	for _, name := range names {
		servers = append(servers, mcpconfig.Server{Name: name, Type: mcpconfig.Stdio, Command: bin, Args: []string{"stdio"}, ProtocolVersion: mcpconfig.DefaultProtocolVersion})
	}
	tr, err := toolrunner.New(t.Context(), toolrunner.Config{Logger: testenv.Logger(t, slog.LevelWarn), Tools: tools.Config{
		Servers: servers, Policy: pol, AuditPath: filepath.Join(t.TempDir(), "tools.jsonl"),
	}}, b)
	if err != nil {
		t.Fatal(err)
	}
	testenv.Go(t, "toolrunner Run", tr.Run)
	testenv.WaitFor(t, 30*time.Second, "the everything servers ready", func() bool {
		s := tr.Runner().Servers()
		ready := 0
		for _, st := range s {
			if st.State == tools.StateReady {
				ready++
			}
		}
		return ready == len(names)
	})
	return pol
}

// slackSeq numbers the test's Slack messages (each its own ts).
var slackSeq atomic.Int64

// slackMessage is a Slack message event as the mapper writes it, in the
// thread 1700000123.000200.
func slackMessage(event, channel, user, text string) *envelope.Envelope {
	e := envelope.New(envelope.ChannelSlack, envelope.RoleUser, "<@"+user+"> mentioned the app in <#"+channel+">: "+text)
	ts := fmt.Sprintf("1700000200.%06d", slackSeq.Add(1))
	e.Meta.Thread = envelope.SlackThread("T0ACME", channel, "1700000123.000200")
	e.Meta.Source = &envelope.Source{Event: event, DeliveryID: "Ev" + channel + user, Actor: user}
	e.Meta.Set("slack", map[string]any{"team": "T0ACME", "channel": channel, "ts": ts, "thread_ts": "1700000123.000200", "user": user, "bot": false, "edit": false})
	return e
}

// slashRun is a `/relay run ...` slash command as the mapper writes it.
func slashRun(channel, user, text string) *envelope.Envelope {
	return slashCommand(channel, user, "run "+text)
}

// slashCommand is `/relay <text>` in channel by user.
func slashCommand(channel, user, text string) *envelope.Envelope {
	e := envelope.New(envelope.ChannelSlack, envelope.RoleUser, "<@"+user+"> ran /relay "+text)
	trigger := fmt.Sprintf("123.%d", slackSeq.Add(1))
	e.Meta.Thread = envelope.SlackThread("T0ACME", channel, "cmd-"+trigger)
	e.Meta.Source = &envelope.Source{Event: "command", Action: "/relay", DeliveryID: trigger, Actor: user}
	e.Meta.Set("slack", map[string]any{"team": "T0ACME", "channel": channel, "user": user, "command": "/relay", "text": text,
		"trigger_id": trigger, "bot": false, "edit": false})
	return e
}

const echoBlock = "```everything\ntool: echo\nmessage: hello from Slack\n```"

// TestCodeBlockRuns runs code blocks written in Slack and on GitHub through
// the real tool runner and mcp-server-everything, and checks what is posted
// back; the model is never asked.
func TestCodeBlockRuns(t *testing.T) {
	t.Parallel()
	h := setupRuns(t)
	tests := []struct {
		name    string
		subject string
		in      *envelope.Envelope
		check   func(t *testing.T, out *envelope.Envelope)
	}{
		{"app mention", "in.slack.app_mention", slackMessage("app_mention", "C0DEV", "U0ONCALL", "<@UBOT> "+echoBlock),
			wantSlackThread("1700000123.000200", "Echo: hello from Slack")},
		{"slash command by a user-group member", "in.slack.command", slashRun("C0DEV", "U0INGROUP", "```\ntool: echo\nmessage: from a command\n```"),
			wantSlackThread("", "Echo: from a command")},
		{"slash command, the verb capitalised and the block on the next line", "in.slack.command", slashCommand("C0DEV", "U0INGROUP", "Run\n```\ntool: echo\nmessage: capitalised\n```"),
			wantSlackThread("", "Echo: capitalised")},
		{"message in a bound channel, Slack escaping undone", "in.slack.message", slackMessage("message", "C0DEV", "U0ONCALL", "```everything\ntool: echo\nmessage: a &lt;b&gt; &amp; c\n```"),
			wantSlackThread("1700000123.000200", "Echo: a &lt;b&gt; &amp; c")},
		{"bad arguments", "in.slack.app_mention", slackMessage("app_mention", "C0DEV", "U0ONCALL", "```everything\ntool: get-sum\na: two\nb: 1\n```"),
			wantSlackThread("1700000123.000200", ":warning:", "everything.get-sum", "invalid arguments")},
		{"server not bound to the channel", "in.slack.app_mention", slackMessage("app_mention", "C0OPS", "U0ONCALL", echoBlock),
			wantSlackThread("1700000123.000200", ":warning:", "server `everything` is not offered here")},
		{"not YAML", "in.slack.app_mention", slackMessage("app_mention", "C0DEV", "U0ONCALL", "```everything\ntool: [echo\n```"),
			wantSlackThread("1700000123.000200", ":warning:", "not YAML")},
		{"GitHub comment", "in.github.issue_comment", githubRunComment("octocat", echoBlock),
			wantGitHub("Echo: hello from Slack")},
		{"JSON as a code block", "in.slack.app_mention", slackMessage("app_mention", "C0DEV", "U0ONCALL", "```everything\ntool: get-structured-content\nlocation: Chicago\n```"),
			wantSlackThread("1700000123.000200", "```", "\"temperature\"")},
	}
	t.Run("a mention in a bound channel, sent as app_mention and as message, runs once", func(t *testing.T) {
		m := slackMessage("app_mention", "C0DEV", "U0ONCALL", "<@UBOT> ```everything\ntool: echo\nmessage: once\n```")
		dup := *m
		dup.ID = uuid.NewString()
		dup.Meta.Source = &envelope.Source{Event: "message", DeliveryID: "Ev-other", Actor: "U0ONCALL"}
		h.publish(t, "in.slack.app_mention", m)
		h.publish(t, "in.slack.message", &dup)
		wantSlackThread("1700000123.000200", "Echo: once")(t, h.nextPost(t))
		// A second run would be the next envelope the table's first case reads.
		// Once both envelopes are handled, one running message was posted:
		// a second would keep its Cancel button and "Running…" for good.
		h.drained(t, ConsumerInbound, "in.slack.x")
		if n := len(h.slack.Calls("chat.postMessage")); n != 1 {
			t.Errorf("got %d running messages, want 1", n)
		}
	})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h.publish(t, tt.subject, tt.in)
			tt.check(t, h.nextPost(t))
		})
	}
	if n := h.llm.count(); n != 0 {
		t.Errorf("the model was asked %d times, want 0: code blocks are runs, not prompts", n)
	}
}

// githubRunComment is a comment on octo-org/api#7.
func githubRunComment(login, body string) *envelope.Envelope {
	e := githubComment(body, login)
	e.Meta.Thread = "github:octo-org/api#7"
	return e
}

func wantSlackThread(threadTS string, parts ...string) func(*testing.T, *envelope.Envelope) {
	return func(t *testing.T, out *envelope.Envelope) {
		t.Helper()
		tg, err := out.Meta.Target()
		if err != nil || tg == nil || tg.Channel != "slack" || tg.ThreadTS != threadTS {
			t.Fatalf("got target %+v (%v), want Slack thread %q", tg, err, threadTS)
		}
		wantParts(t, out.Content, parts)
	}
}

func wantGitHub(parts ...string) func(*testing.T, *envelope.Envelope) {
	return func(t *testing.T, out *envelope.Envelope) {
		t.Helper()
		tg, err := out.Meta.Target()
		if err != nil || tg == nil || tg.Channel != "github" || tg.Owner != "octo-org" || tg.Repo != "api" || tg.Number != 7 {
			t.Fatalf("got target %+v (%v), want GitHub octo-org/api#7", tg, err)
		}
		if k := out.Meta.GetString("idempotency_key"); !strings.HasPrefix(k, "run-result:") {
			t.Errorf("got idempotency key %q, want one derived from the run", k)
		}
		wantParts(t, out.Content, parts)
	}
}

func wantParts(t *testing.T, content string, parts []string) {
	t.Helper()
	for _, p := range parts {
		if !strings.Contains(content, p) {
			t.Errorf("got %q, want it to contain %q", content, p)
		}
	}
}

// TestCodeBlockFiles checks that an image result and a long result are
// uploaded to the thread (files.getUploadURLExternal, the upload,
// files.completeUploadExternal) with a summary line posted.
func TestCodeBlockFiles(t *testing.T) {
	t.Parallel()
	h := setupRuns(t)
	h.publish(t, "in.slack.app_mention", slackMessage("app_mention", "C0DEV", "U0ONCALL", "```everything\ntool: get-tiny-image\n```"))
	wantSlackThread("1700000123.000200", "image attached")(t, h.nextPost(t))
	long := strings.Repeat("0123456789", 80)
	h.publish(t, "in.slack.app_mention", slackMessage("app_mention", "C0DEV", "U0ONCALL", "```everything\ntool: echo\nmessage: "+long+"\n```"))
	wantSlackThread("1700000123.000200", "returned 1 lines, 806 characters", "full output attached")(t, h.nextPost(t))
	ups := h.slack.Uploads()
	if len(ups) != 2 {
		t.Fatalf("got %d uploads, want the image and the long output", len(ups))
	}
	if !bytes.HasPrefix(ups[0].Data, []byte("\x89PNG")) || ups[0].Channel != "C0DEV" || ups[0].ThreadTS != "1700000123.000200" {
		t.Errorf("image upload: got %d bytes %q in %s/%s, want a PNG in the thread", len(ups[0].Data), ups[0].Data[:min(4, len(ups[0].Data))], ups[0].Channel, ups[0].ThreadTS)
	}
	if string(ups[1].Data) != "Echo: "+long {
		t.Errorf("long output upload: got %d bytes, want the full echo", len(ups[1].Data))
	}
}

// TestCodeBlockRefused checks that a person without a role gets an ephemeral
// refusal and the runner audits permission_denied, without running the tool.
func TestCodeBlockRefused(t *testing.T) {
	t.Parallel()
	h := setupRuns(t)
	h.publish(t, "in.slack.app_mention", slackMessage("app_mention", "C0DEV", "U0NOBODY", echoBlock))
	var rec map[string]any
	testenv.WaitFor(t, 30*time.Second, "a permission_denied audit record", func() bool {
		select {
		case e := <-h.audit:
			rec, _ = e.Meta.Extra["audit"].(map[string]any)
			return rec["status"] == string(tools.StatusPermissionDenied)
		default:
			return false
		}
	})
	if rec["tool"] != "echo" || rec["agent_id"] != "slack:U0NOBODY" {
		t.Errorf("audit record %v: want echo by slack:U0NOBODY", rec)
	}
	testenv.WaitFor(t, 10*time.Second, "chat.postEphemeral", func() bool { return len(h.slack.Calls("chat.postEphemeral")) == 1 })
	c := h.slack.Calls("chat.postEphemeral")[0]
	if c.Params["user"] != "U0NOBODY" || c.Params["channel"] != "C0DEV" || !strings.Contains(c.Params["text"], "holds no role") {
		t.Errorf("got ephemeral %v, want a refusal to U0NOBODY in C0DEV", c.Params)
	}
	h.publish(t, "in.github.issue_comment", githubRunComment("stranger", echoBlock))
	wantGitHub("stranger holds no role", "`everything.echo` was not run")(t, h.nextPost(t))
}

// TestSeveralCodeBlocksRun: each run block of a message runs on its own
// (its own execution and answer; a bad one is answered without stopping the
// others), and past MaxRunsPerMessage a note says the rest did not run.
func TestSeveralCodeBlocksRun(t *testing.T) {
	t.Parallel()
	h := setupRuns(t)
	echo := func(msg string) string { return "```everything\ntool: echo\nmessage: " + msg + "\n```" }
	text := "<@UBOT> " + echo("first") + "\nand\n```everything\ntool: get-sum\na: two\nb: 1\n```\n" + echo("second")
	h.publish(t, "in.slack.app_mention", slackMessage("app_mention", "C0DEV", "U0ONCALL", text))
	got := map[string]bool{}
	for range 3 {
		out := h.nextPost(t)
		switch c := out.Content; {
		case strings.Contains(c, "Echo: first"):
			got["first"] = true
		case strings.Contains(c, "Echo: second"):
			got["second"] = true
		case strings.Contains(c, "everything.get-sum") && strings.Contains(c, "invalid arguments"):
			got["bad"] = true
		default:
			t.Errorf("unexpected answer %q", c)
		}
	}
	if len(got) != 3 {
		t.Fatalf("answers %v, want both echoes and the bad block's warning", got)
	}
	execs := map[string]bool{}
	for range 2 {
		e := testenv.Receive(t, h.audit, 30*time.Second, "an audit record")
		rec, _ := e.Meta.Extra["audit"].(map[string]any)
		id, _ := rec["execution_id"].(string)
		execs[id] = true
	}
	if len(execs) != 2 {
		t.Errorf("audit records of executions %v, want two different ones", execs)
	}

	many := "<@UBOT>"
	for i := range MaxRunsPerMessage + 1 {
		many += "\n" + echo(fmt.Sprintf("b%d.", i+1))
	}
	h.publish(t, "in.slack.app_mention", slackMessage("app_mention", "C0DEV", "U0ONCALL", many))
	var note int
	echoed := map[string]bool{}
	for range MaxRunsPerMessage + 1 {
		c := h.nextPost(t).Content
		if strings.Contains(c, fmt.Sprintf("only the first %d run", MaxRunsPerMessage)) {
			note++
			continue
		}
		_, b, _ := strings.Cut(c, "Echo: ")
		echoed[strings.TrimSpace(b)] = true
	}
	if note != 1 || len(echoed) != MaxRunsPerMessage || echoed[fmt.Sprintf("b%d.", MaxRunsPerMessage+1)] {
		t.Errorf("got %d notes and echoes %v, want one note and b1.-b%d.", note, echoed, MaxRunsPerMessage)
	}
}

// TestBindingsLimitAgentTools checks that the agent offers the model only
// the servers bound to the place: the channel's own binding, the workspace's
// inherited one.
func TestBindingsLimitAgentTools(t *testing.T) {
	t.Parallel()
	h := setupRuns(t, say("done"))
	for _, c := range []struct{ channel, server, other string }{{"C0OPS", "other", "everything"}, {"C0DEV", "everything", "other"}} {
		n := h.llm.count()
		h.publish(t, "in.slack.app_mention", slackMessage("app_mention", c.channel, "U0ONCALL", "<@relay-bot> what is up?"))
		testenv.WaitFor(t, 30*time.Second, "the model asked", func() bool { return h.llm.count() > n })
		names := h.llm.requests()[n].ToolNames()
		if !slices.ContainsFunc(names, func(s string) bool { return strings.HasPrefix(s, c.server+"__") }) ||
			slices.ContainsFunc(names, func(s string) bool { return strings.HasPrefix(s, c.other+"__") }) {
			t.Errorf("in %s: offered %v, want only %s's tools", c.channel, names, c.server)
		}
	}
}

// runCallIDFromBlocks is the Cancel button's value: the execution id, a UUID.
func runCallIDFromBlocks(blocks string) string {
	i := strings.Index(blocks, `"value":"`)
	if i < 0 {
		return "(no button value)"
	}
	v := blocks[i+len(`"value":"`):]
	v, _, _ = strings.Cut(v, `"`)
	if uuid.Validate(v) != nil {
		return "(button value is not an execution id)"
	}
	return v
}
