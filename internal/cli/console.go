package cli

import (
	"context"

	"github.com/relaystation/relay/bus"
	"github.com/relaystation/relay/config"
	"github.com/relaystation/relay/internal/story"
	"github.com/relaystation/relay/services/console"
	"github.com/relaystation/relay/services/toolrunner"
)

func init() {
	registerService(&service{
		name:      "console",
		summary:   "the operator console on RELAY_CONSOLE_ADDR (default 127.0.0.1:8081): live events, stories, approvals, dead letters, tools",
		configure: configureConsole,
	})
}

// configureConsole reads the console's settings (console.ReadSettings) and
// builds it on the tool runners' shared state and the story builder of
// `relay trace` (internal/story).
func configureConsole(env *config.Env) buildFunc {
	cfg := console.ReadSettings(env).Config
	// The servers of mcp.json and RELAY_SECRET_KEY: Connect and the
	// `/relay connect` links (docs/oauth.md).
	ts := toolrunner.ReadSettings(env)
	return func(ctx context.Context, d *deps) (*runner, error) {
		cfg.Logger = d.Log
		st, err := toolrunner.OpenState(ctx, d.Bus)
		if err != nil {
			return nil, err
		}
		cfg.Tools = st
		conn, err := oauthConnector(ctx, ts, d.Bus)
		if err != nil {
			return nil, err
		}
		if conn != nil {
			cfg.Connect = conn
		}
		cfg.Story = storyteller{d.Bus}
		return runnerOf(console.New(cfg, d.Bus))
	}
}

// storyteller tells the console the stories `relay trace` prints.
type storyteller struct{ b *bus.Bus }

// Story implements console.Storyteller with story.BuildWith.
func (s storyteller) Story(ctx context.Context, id string) (*console.Story, error) {
	st, err := story.BuildWith(ctx, s.b, id, story.Options{Limit: 500})
	if err != nil {
		return nil, err
	}
	out := &console.Story{Query: st.Query, Thread: st.Thread, Tasks: st.Tasks, Deliveries: st.Deliveries}
	for _, h := range st.Hops {
		hop := console.Hop{Time: h.Time, Since: h.Since, Kind: h.Kind, Subject: h.Subject, Actor: h.Actor,
			Summary: h.Summary, Link: h.Link, Duration: h.Duration, TraceID: h.TraceID, Envelope: h.Envelope}
		if h.Tokens != nil {
			hop.Tokens = h.Tokens.Prompt + h.Tokens.Completion
		}
		out.Hops = append(out.Hops, hop)
	}
	return out, nil
}
