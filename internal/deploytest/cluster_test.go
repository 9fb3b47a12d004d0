package deploytest

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/cli"
)

// The cluster profile adds two JetStream nodes that route to each other and
// to the default `nats` server, which stays alone unless deploy/cluster.env
// makes it the first node (TestComposeClusterEnv), so the cluster profile
// runs exactly three servers and the default stack one.
func TestComposeClusterProfile(t *testing.T) {
	t.Parallel()
	p := loadCompose(t)
	nodes := []string{"nats", "nats-2", "nats-3"}
	for _, name := range nodes[1:] {
		s, err := p.GetService(name)
		if err != nil {
			t.Fatalf("service %s missing: %v", name, err)
		}
		if !slices.Contains(s.Profiles, "cluster") {
			t.Errorf("%s profiles %v, want cluster (the default stack keeps one server)", name, s.Profiles)
		}
		checkNATSNode(t, name, strings.Join(s.Command, " "), nodes)
	}
	nats, err := p.GetService("nats")
	if err != nil {
		t.Fatal(err)
	}
	if len(nats.Profiles) != 0 {
		t.Errorf("nats profiles %v, want none (it runs in the default stack and is the cluster's first node)", nats.Profiles)
	}
	if cmd := strings.Join(nats.Entrypoint, " "); strings.Contains(cmd, "--cluster") {
		t.Errorf("nats entrypoint %q is clustered without deploy/cluster.env", cmd)
	}
	if _, err := p.GetService("nats-1"); err == nil {
		t.Error("service nats-1 exists: the cluster profile would run four servers")
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

// checkNATSNode checks that a node's command line runs JetStream in the
// cluster "relay" under its own name, with routes to every other node.
func checkNATSNode(t *testing.T, name, cmd string, nodes []string) {
	t.Helper()
	for _, want := range []string{"-js", "--cluster_name relay", "--cluster nats://0.0.0.0:6222"} {
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
	nats, err := p.GetService("nats")
	if err != nil {
		t.Fatal(err)
	}
	checkNATSNode(t, "nats", strings.Join(nats.Entrypoint, " "), []string{"nats", "nats-2", "nats-3"})
	for name, s := range p.Services {
		if s.Build == nil {
			continue
		}
		if v := s.Environment["RELAY_STREAM_REPLICAS"]; v == nil || *v != "3" {
			t.Errorf("%s RELAY_STREAM_REPLICAS = %v, want 3", name, v)
		}
		url := s.Environment["NATS_URL"]
		for _, node := range []string{"nats", "nats-2", "nats-3"} {
			if url == nil || !strings.Contains(*url, "nats://"+node+":4222") {
				t.Errorf("%s NATS_URL = %v, want it to name %s", name, url, node)
			}
		}
	}
}
