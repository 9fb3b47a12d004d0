package memory

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/relaystation/relay/bus/bustest"
	"github.com/relaystation/relay/config"
	"github.com/relaystation/relay/internal/testenv"
)

func TestReadSettingsPairs(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"EMBEDDINGS_MODEL": "nomic-embed-text"}, "EMBEDDINGS_MODEL"},
		{map[string]string{"EMBEDDINGS_BASE_URL": "http://127.0.0.1:11434/v1"}, "EMBEDDINGS_MODEL"},
		{map[string]string{"LLM_BASE_URL": "http://127.0.0.1:11434/v1"}, "LLM_MODEL"},
		{map[string]string{"RELAY_MEMORY_DIMENSIONS": "0"}, "RELAY_MEMORY_DIMENSIONS"},
		{map[string]string{"REDIS_URL": "http://x"}, "REDIS_URL"},
	} {
		env := config.FromMap(tc.env)
		ReadSettings(env)
		if err := env.Err(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: got error %v, want one naming %s", tc.env, err, tc.want)
		}
	}
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
