// Package deploytest checks the deployment files (docker-compose.yml,
// Dockerfile, .env.example) with the compose-spec loader, since this machine
// cannot run Docker.
package deploytest

import (
	"bufio"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/cli"
	"github.com/compose-spec/compose-go/v2/types"

	"github.com/relaystation/relay/internal/testenv"
	"github.com/relaystation/relay/tools/mcpconfig"
)

func root(t *testing.T) string {
	t.Helper()
	r, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func loadCompose(t *testing.T) *types.Project {
	t.Helper()
	opts, err := cli.NewProjectOptions([]string{filepath.Join(root(t), "docker-compose.yml")},
		cli.WithWorkingDirectory(root(t)), cli.WithName("relay"), cli.WithInterpolation(true),
		cli.WithProfiles([]string{"*"}))
	if err != nil {
		t.Fatal(err)
	}
	p, err := opts.LoadProject(t.Context())
	if err != nil {
		t.Fatalf("docker-compose.yml does not load: %v", err)
	}
	return p
}

func TestComposeFile(t *testing.T) {
	t.Parallel()
	p := loadCompose(t)
	for _, name := range []string{"nats", "redis", "postgres", "relay", "ingest", "agent", "toolrunner", "memory", "approvals", "outbound"} {
		if _, err := p.GetService(name); err != nil {
			t.Errorf("service %s missing: %v", name, err)
		}
	}
	nats, _ := p.GetService("nats")
	if cmd := strings.Join(nats.Entrypoint, " "); !strings.Contains(cmd, "nats-server -js ") {
		t.Errorf("nats entrypoint %q lacks -js (JetStream)", cmd)
	}
	pg, _ := p.GetService("postgres")
	if !strings.Contains(pg.Image, "pgvector") {
		t.Errorf("postgres image %q is not a pgvector image", pg.Image)
	}
	relayServices := 0
	for name, s := range p.Services {
		if s.Build == nil {
			continue
		}
		relayServices++
		t.Run(name, func(t *testing.T) {
			if s.Image != "relaystation/relay:dev" {
				t.Errorf("image %q, want every relay service on the one image relaystation/relay:dev", s.Image)
			}
			if s.HealthCheck == nil || len(s.HealthCheck.Test) == 0 || !slices.Contains(s.HealthCheck.Test, "healthcheck") {
				t.Errorf("health check %+v, want `relay healthcheck`", s.HealthCheck)
			}
			for _, dep := range []string{"nats", "redis", "postgres"} {
				if d, ok := s.DependsOn[dep]; !ok || d.Condition != types.ServiceConditionHealthy {
					t.Errorf("depends_on %s: %+v, want condition service_healthy", dep, d)
				}
			}
			for k, want := range map[string]string{"NATS_URL": "nats://nats:4222", "REDIS_URL": "redis://redis:6379"} {
				if v := s.Environment[k]; v == nil || *v != want {
					t.Errorf("%s = %v, want %s", k, v, want)
				}
			}
			if len(s.Command) == 0 {
				t.Error("no command: say which relay service runs")
			}
		})
	}
	if relayServices == 0 {
		t.Fatal("no service is built from the Dockerfile")
	}
	// Each worker runs its own relay subcommand; the tool runner gets its
	// MCP servers and policy from deploy/.
	for name, want := range map[string]string{"ingest": "ingest", "agent": "agent", "toolrunner": "toolrunner",
		"memory": "memory", "approvals": "approvals", "outbound": "outbound", "relay": "serve"} {
		s, _ := p.GetService(name)
		if len(s.Command) != 1 || s.Command[0] != want {
			t.Errorf("%s command %v, want [%s]", name, s.Command, want)
		}
	}
	// The agent reads the same policy: without it code-block runs are off.
	for name, keys := range map[string][]string{"toolrunner": {"RELAY_MCP_CONFIG", "RELAY_POLICY"}, "agent": {"RELAY_POLICY"}} {
		s, _ := p.GetService(name)
		for _, k := range keys {
			v := s.Environment[k]
			if v == nil {
				t.Errorf("%s lacks %s", name, k)
				continue
			}
			local := filepath.Join(root(t), "deploy", filepath.Base(*v))
			if _, err := os.Stat(local); err != nil {
				t.Errorf("%s: %s=%s: %s is not in deploy/: %v", name, k, *v, filepath.Base(*v), err)
			}
			if !slices.ContainsFunc(s.Volumes, func(v types.ServiceVolumeConfig) bool { return v.Target == "/etc/relay" }) {
				t.Errorf("%s: %s=%s but deploy/ is not mounted at /etc/relay", name, k, *v)
			}
		}
	}
}

func TestDockerfile(t *testing.T) {
	t.Parallel()
	b := testenv.ReadFile(t, filepath.Join(root(t), "Dockerfile"))
	df := string(b)
	if strings.Count(df, "\nFROM ") < 1 || strings.Count(df, "FROM ") < 2 {
		t.Error("Dockerfile is not multi-stage")
	}
	for _, want := range []string{"go build", "./cmd/relay", `ENTRYPOINT ["relay"]`, "HEALTHCHECK", "USER "} {
		if !strings.Contains(df, want) {
			t.Errorf("Dockerfile lacks %q", want)
		}
	}
}

// Every variable in .env.example is documented in docs/configuration.md, and
// every variable that page's tables name is in .env.example.
func TestEnvExampleMatchesConfigurationDocs(t *testing.T) {
	t.Parallel()
	f, err := os.Open(filepath.Join(root(t), ".env.example"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	readme := testenv.ReadFile(t, filepath.Join(root(t), "docs", "configuration.md"))
	example := map[string]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(sc.Text()), "#"))
		name, _, ok := strings.Cut(line, "=")
		if !ok || name == "" || strings.ContainsAny(name, " \t") {
			continue
		}
		example[name] = true
		if !strings.Contains(string(readme), "`"+name+"`") {
			t.Errorf(".env.example names %s, which docs/configuration.md does not document", name)
		}
	}
	for _, line := range strings.Split(string(readme), "\n") {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		name := strings.Trim(strings.SplitN(line, "|", 3)[1], " `")
		if strings.ToUpper(name) == name && strings.ContainsRune(name, '_') && !example[name] {
			t.Errorf("docs/configuration.md documents %s, which .env.example lacks", name)
		}
	}
}

// The tool runner's shipped configuration loads and lets the agent role call
// the shipped server's tools.
func TestDeployToolConfig(t *testing.T) {
	t.Parallel()
	servers, err := mcpconfig.Load(filepath.Join(root(t), "deploy", "mcp.json"), mcpconfig.Options{})
	if err != nil {
		t.Fatalf("deploy/mcp.json: %v", err)
	}
	if len(servers) == 0 {
		t.Fatal("deploy/mcp.json lists no servers")
	}
	pol, err := mcpconfig.LoadPolicy(filepath.Join(root(t), "deploy", "policy.yaml"))
	if err != nil {
		t.Fatalf("deploy/policy.yaml: %v", err)
	}
	if !pol.Allowed("agent", servers[0].Name, "echo") {
		t.Errorf("role agent may not call %s.echo", servers[0].Name)
	}
	if pol.Allowed("nobody", servers[0].Name, "echo") {
		t.Error("an unknown role may call tools")
	}
}
