package memory

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/relaystation/relay/bus/bustest"
	"github.com/relaystation/relay/config"
	"github.com/relaystation/relay/config/configtest"
	"github.com/relaystation/relay/envelope"
	"github.com/relaystation/relay/internal/testenv"
)

func TestReadSettingsPairs(t *testing.T) {
	t.Parallel()
	configtest.Run(t, ReadSettings, []configtest.Case[Settings]{
		{Name: "embeddings model without URL", Env: map[string]string{"EMBEDDINGS_MODEL": "nomic-embed-text"}, WantErr: []string{"EMBEDDINGS_MODEL"}},
		{Name: "embeddings URL without model", Env: map[string]string{"EMBEDDINGS_BASE_URL": "http://127.0.0.1:11434/v1"}, WantErr: []string{"EMBEDDINGS_MODEL"}},
		{Name: "LLM URL without model", Env: map[string]string{"LLM_BASE_URL": "http://127.0.0.1:11434/v1"}, WantErr: []string{"LLM_MODEL"}},
		{Name: "zero dimensions", Env: map[string]string{"RELAY_MEMORY_DIMENSIONS": "0"}, WantErr: []string{"RELAY_MEMORY_DIMENSIONS"}},
		{Name: "Redis URL not redis", Env: map[string]string{"REDIS_URL": "http://x"}, WantErr: []string{"REDIS_URL"}},
	})
}

// TestOpen opens the memory the settings name: the embedded stores on a bus,
// and Redis sessions (with a readiness check) when REDIS_URL is set.
func TestOpen(t *testing.T) {
	t.Parallel()
	b := bustest.Embedded(t)
	log := slog.New(slog.DiscardHandler)
	for _, tc := range []struct {
		name       string
		env        map[string]string
		wantChecks []string
	}{
		{"embedded", map[string]string{}, nil},
		{"redis", map[string]string{"REDIS_URL": testenv.Getenv("REDIS_URL", "redis://127.0.0.1:6379")}, []string{"redis"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := config.FromMap(tc.env)
			s := ReadSettings(env)
			if err := env.Err(); err != nil {
				t.Fatal(err)
			}
			o, err := s.Open(t.Context(), b, t.TempDir(), log)
			if err != nil {
				if tc.name == "redis" {
					testenv.Missing(t, "redis at %s: %v", tc.env["REDIS_URL"], err)
				}
				t.Fatal(err)
			}
			defer o.Close()
			if o.Memory == nil || len(o.Checks) != len(tc.wantChecks) {
				t.Fatalf("got memory %v, checks %v; want a memory and checks %v", o.Memory, o.Checks, tc.wantChecks)
			}
			for _, name := range tc.wantChecks {
				if err := o.Checks[name](context.Background()); err != nil {
					t.Errorf("check %s: %v", name, err)
				}
			}
		})
	}
}

// TestOpenEpisodeTTL: an episodic memory without a ttl lives
// RELAY_MEMORY_EPISODE_TTL, also past the stores' default 30-day cap, and one
// whose ttl is longer than that lives its ttl up to the setting's cap.
func TestOpenEpisodeTTL(t *testing.T) {
	t.Parallel()
	b := bustest.Embedded(t)
	env := config.FromMap(map[string]string{"RELAY_MEMORY_EPISODE_TTL": "1440h"})
	s := ReadSettings(env)
	if err := env.Err(); err != nil {
		t.Fatal(err)
	}
	o, err := s.Open(t.Context(), b, t.TempDir(), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	for _, tc := range []struct {
		name string
		ttl  int64
		want time.Duration
	}{
		{"default", 0, 60 * 24 * time.Hour},
		{"ttl", int64((45 * 24 * time.Hour).Seconds()), 45 * 24 * time.Hour},
	} {
		e := envelope.New(envelope.ChannelInternal, envelope.RoleSystem, "")
		e.Meta.Thread = "episode-ttl-" + tc.name
		e.MemoryUpdate = &envelope.MemoryUpdate{Kind: envelope.MemoryEpisodic, Data: map[string]any{"k": "v"}, TTL: tc.ttl}
		if err := o.Memory.Observe(t.Context(), e); err != nil {
			t.Fatal(err)
		}
		c, err := o.Memory.Context(t.Context(), e.Meta.Thread, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(c.Episodes) != 1 {
			t.Fatalf("%s: got %d episodes, want 1", tc.name, len(c.Episodes))
		}
		if got := time.Until(c.Episodes[0].Expires); got < tc.want-time.Hour || got > tc.want {
			t.Errorf("%s: episode expires in %v, want %v", tc.name, got, tc.want)
		}
	}
}
