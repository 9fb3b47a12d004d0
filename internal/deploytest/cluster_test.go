package deploytest

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/cli"
)

// The cluster profile runs three JetStream nodes that route to each other,
// and every relay service can be pointed at them (COMPOSE_NATS_URL) with a
// replica count (RELAY_STREAM_REPLICAS).
func TestComposeClusterProfile(t *testing.T) {
	t.Parallel()
	p := loadCompose(t)
	nodes := []string{"nats-1", "nats-2", "nats-3"}
	for _, name := range nodes {
		s, err := p.GetService(name)
		if err != nil {
			t.Fatalf("service %s missing: %v", name, err)
		}
		if !slices.Contains(s.Profiles, "cluster") {
			t.Errorf("%s profiles %v, want cluster (the default stack keeps one server)", name, s.Profiles)
		}
		cmd := strings.Join(s.Command, " ")
		for _, want := range []string{"-js", "--cluster_name relay", "--name " + name} {
			if !strings.Contains(cmd, want) {
				t.Errorf("%s command %q lacks %q", name, cmd, want)
			}
		}
		for _, peer := range nodes {
			if peer != name && !strings.Contains(cmd, "nats://"+peer+":6222") {
				t.Errorf("%s command %q does not route to %s", name, cmd, peer)
			}
		}
	}
	for name, s := range p.Services {
		if s.Build == nil {
			continue
		}
		if v := s.Environment["RELAY_STREAM_REPLICAS"]; v == nil || *v != "1" {
			t.Errorf("%s RELAY_STREAM_REPLICAS = %v, want 1 by default", name, v)
		}
	}
}

// deploy/cluster.env, the cluster profile's settings, points every relay
// service at the three nodes with replicas 3.
func TestComposeClusterEnv(t *testing.T) {
	t.Parallel()
	opts, err := cli.NewProjectOptions([]string{filepath.Join(root(t), "docker-compose.yml")},
		cli.WithWorkingDirectory(root(t)), cli.WithName("relay"), cli.WithEnvFiles(filepath.Join(root(t), "deploy", "cluster.env")),
		cli.WithDotEnv, cli.WithInterpolation(true), cli.WithProfiles([]string{"cluster"}))
	if err != nil {
		t.Fatal(err)
	}
	p, err := opts.LoadProject(t.Context())
	if err != nil {
		t.Fatalf("docker-compose.yml with deploy/cluster.env does not load: %v", err)
	}
	for name, s := range p.Services {
		if s.Build == nil {
			continue
		}
		if v := s.Environment["RELAY_STREAM_REPLICAS"]; v == nil || *v != "3" {
			t.Errorf("%s RELAY_STREAM_REPLICAS = %v, want 3", name, v)
		}
		url := s.Environment["NATS_URL"]
		for _, node := range []string{"nats-1", "nats-2", "nats-3"} {
			if url == nil || !strings.Contains(*url, "nats://"+node+":4222") {
				t.Errorf("%s NATS_URL = %v, want it to name %s", name, url, node)
			}
		}
	}
}
