package cli

import (
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/relaystation/relay/internal/fakes"
	"github.com/relaystation/relay/internal/testenv"
	"github.com/relaystation/relay/mappers/slack"
	"github.com/relaystation/relay/tools/oauthtest"
)

// Two Slack people with their own accounts at a per-user server, and one
// who has not connected.
const (
	e2eAlice = "U0ALICE"
	e2eBob   = "U0BOB"
	e2eCarol = "U0CAROL"
)

// slashCommand posts a signed `/relay <text>` slash command by user in
// channel, as Slack does.
func (s *stack) slashCommand(user, channel, text string) {
	s.t.Helper()
	form := url.Values{"token": {"unused"}, "team_id": {e2eTeam}, "team_domain": {"e2e"}, "channel_id": {channel}, "channel_name": {"ops"},
		"user_id": {user}, "user_name": {strings.ToLower(user)}, "command": {"/relay"}, "text": {text},
		"trigger_id": {fmt.Sprintf("%d.%s", time.Now().UnixNano(), user)}, "response_url": {s.slack.URL() + "response"}, "api_app_id": {"A0APP01"}}
	s.postSlack(slack.RouteCommands, "application/x-www-form-urlencoded", []byte(form.Encode()))
}

var linkRE = regexp.MustCompile(`<(http[^|>]+/oauth/connect\?t=[^|>]+)\|`)

// connectLink waits for the ephemeral message to user carrying a
// connection link, after the first skip such messages to them, and returns
// the link.
func (s *stack) connectLink(user string, skip int) string {
	s.t.Helper()
	var link string
	testenv.WaitFor(s.t, 60*time.Second, "the connection link for "+user, func() bool {
		n := 0
		for _, c := range s.slack.Calls("chat.postEphemeral") {
			if c.Params["user"] != user {
				continue
			}
			if m := linkRE.FindStringSubmatch(c.Params["text"]); m != nil {
				if n++; n > skip {
					link = m[1]
					return true
				}
			}
		}
		return false
	})
	return link
}

// posted waits for a message or update in channel whose text has want.
func (s *stack) posted(channel, want string) fakes.SlackCall {
	s.t.Helper()
	return s.slackCall("a message with "+want, func(c fakes.SlackCall) bool {
		return c.Params["channel"] == channel && strings.Contains(c.Params["text"], want)
	}, "chat.postMessage", "chat.update")
}

// connectAccount has slackUser connect their own account at per-user
// server srv (the mcp.json entry "hosted") as identity: `/relay connect
// hosted`, the ephemeral link, the login at the authorization server; the
// link then works no more.
func (s *stack) connectAccount(srv *oauthtest.Server, slackUser, identity string) {
	s.t.Helper()
	browser := &http.Client{} // follows the redirects: console, authorization server, console callback
	srv.SetUser(identity)
	s.slashCommand(slackUser, e2eChannel, "connect hosted")
	link := s.connectLink(slackUser, 0)
	if !strings.HasPrefix(link, "http://"+s.env["RELAY_CONSOLE_ADDR"]+"/oauth/connect?t=") {
		s.t.Fatalf("got link %q, want the console's /oauth/connect", link)
	}
	resp, err := browser.Get(link)
	must(s.t, err)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Request.URL.Path != "/oauth/callback" {
		s.t.Fatalf("%s's connection ended at %s with %s, want 200 at /oauth/callback", slackUser, resp.Request.URL, resp.Status)
	}
	again, err := browser.Get(link)
	must(s.t, err)
	again.Body.Close()
	if again.StatusCode != http.StatusGone {
		s.t.Errorf("%s's link opened twice: %s, want 410", slackUser, again.Status)
	}
}

// TestPerUserServerFromSlack: a per-user OAuth server ("oauth": {"per":
// "user"}) used through `relay serve` by two Slack people who connected
// different identities: each asks `/relay connect hosted`, gets an
// ephemeral link to the console (signed for them, single use), logs in at
// the authorization server, and their code-block runs reach the server
// with their own token (it answers with the token's user). A third person
// who has not connected is refused and gets one ephemeral link, never
// someone else's token; the audit names each run's principal.
func TestPerUserServerFromSlack(t *testing.T) {
	t.Parallel()
	testenv.SkipShort(t, "end-to-end")
	srv := oauthtest.Start(t, oauthtest.Options{})
	pol := `roles:
  - role: agent
    capabilities: ["everything.*"]
  - role: people
    capabilities: ["hosted.*"]
    members:
      slack: [` + e2eAlice + `, ` + e2eBob + `, ` + e2eCarol + `]
`
	s, audit := startPerUserStack(t, srv, pol, nil)
	s.connectAccount(srv, e2eAlice, "alice")
	s.connectAccount(srv, e2eBob, "bob")

	for _, p := range []struct{ slackUser, want string }{{e2eAlice, "user:alice"}, {e2eBob, "user:bob"}} {
		s.mention(p.slackUser, e2eChannel, "<@UBOT> please\n```hosted\ntool: whoami\n```")
		s.posted(e2eChannel, p.want)
	}

	// Carol has not connected: refused, and one ephemeral link for her.
	before := srv.Logins.Load()
	s.mention(e2eCarol, e2eChannel, "<@UBOT> please\n```hosted\ntool: whoami\n```")
	link := s.connectLink(e2eCarol, 0)
	if !strings.Contains(link, "/oauth/connect?t=") {
		t.Fatalf("got %q, want a connection link", link)
	}
	s.posted(e2eChannel, "/relay connect hosted")
	if srv.Logins.Load() != before {
		t.Errorf("a login happened for carol without her")
	}
	for _, want := range []string{`"principal":"` + e2eAlice + `"`, `"principal":"` + e2eBob + `"`, `"principal":"` + e2eCarol + `"`} {
		testenv.WaitFor(t, 30*time.Second, "the audit record with "+want, func() bool {
			raw, err := os.ReadFile(audit)
			return err == nil && strings.Contains(string(raw), want)
		})
	}
	n := 0
	for _, c := range s.slack.Calls("chat.postEphemeral") {
		if c.Params["user"] == e2eCarol && linkRE.MatchString(c.Params["text"]) {
			n++
		}
	}
	if n != 1 {
		t.Errorf("got %d ephemeral links for carol, want 1", n)
	}
}

// startPerUserStack starts the stack with the everything server and
// hosted, srv as a per-user server ("oauth": {"per": "user"}), the policy
// pol, a secret key and a tool audit log, whose path it returns; more
// changes env further.
func startPerUserStack(t *testing.T, srv *oauthtest.Server, pol string, more func(env map[string]string)) (*stack, string) {
	t.Helper()
	audit := filepath.Join(t.TempDir(), "tools.jsonl")
	s := startStack(t, func(env map[string]string) {
		dir := t.TempDir()
		mcp := fmt.Sprintf(`{"servers": {"everything": {"command": %q, "args": ["stdio"]},
		  "hosted": {"type": "http", "url": %q, "protocolVersion": "2025-06-18", "oauth": {"per": "user"}}}}`,
			testenv.NPMBin(t, "mcp-server-everything"), srv.MCP)
		must(t, os.WriteFile(filepath.Join(dir, "mcp.json"), []byte(mcp), 0o600))
		must(t, os.WriteFile(filepath.Join(dir, "policy.yaml"), []byte(pol), 0o600))
		env["RELAY_MCP_CONFIG"] = filepath.Join(dir, "mcp.json")
		env["RELAY_POLICY"] = filepath.Join(dir, "policy.yaml")
		env["RELAY_AUDIT_LOG"] = audit
		env["RELAY_SECRET_KEY"] = "e2e-secret-key-0123456789abcdef-0123456789"
		if more != nil {
			more(env)
		}
	})
	return s, audit
}
