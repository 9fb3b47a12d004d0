package mcpconfig

import (
	"slices"
	"strings"
	"testing"
)

// issuePolicy is the policy file of issue 14, the contract other tools write.
const issuePolicy = `
roles:
  - role: oncall
    capabilities: ["everything.*", "github.read"]
    members:
      slack: [U0ONCALL, S0ONCALLGROUP]
      github: [octocat]
  - role: viewer
    capabilities: ["everything.write"]
    members:
      slack: [U0VIEWER, U0ONCALL]
bindings:
  - slack: {team: T0ACME}
    servers: [everything, github]
    inheritToChildren: true
  - slack: {channel: C0OPS}
    servers: [everything]
  - github: {org: octo-org}
    servers: [github, jira]
    inheritToChildren: true
  - github: {repo: octo-org/api}
    servers: [github]
  - github: {org: solo}
    servers: [jira]
  - sentry: {project: backend}
    servers: [github]
  - openproject: {project: ops}
    servers: [jira]
`

func parseIssuePolicy(t *testing.T) *Policy {
	t.Helper()
	p, err := ParsePolicy([]byte(issuePolicy))
	if err != nil {
		t.Fatalf("ParsePolicy: %v", err)
	}
	return p
}

func TestServersAt(t *testing.T) {
	t.Parallel()
	p := parseIssuePolicy(t)
	tests := []struct {
		name  string
		loc   Location
		want  []string
		bound bool
	}{
		{"channel's own binding wins", Location{ProviderSlack, "T0ACME", "C0OPS"}, []string{"everything"}, true},
		{"channel inherits its workspace", Location{ProviderSlack, "T0ACME", "C0DEV"}, []string{"everything", "github"}, true},
		{"other workspace unbound", Location{ProviderSlack, "T0OTHER", "C0DEV"}, nil, false},
		{"repo's own binding wins", Location{ProviderGitHub, "octo-org", "octo-org/api"}, []string{"github"}, true},
		{"repo inherits its org", Location{ProviderGitHub, "octo-org", "octo-org/web"}, []string{"github", "jira"}, true},
		{"org without inheritance binds only itself", Location{ProviderGitHub, "solo", "solo/x"}, nil, false},
		{"org itself", Location{ProviderGitHub, "solo", ""}, []string{"jira"}, true},
		{"github names in any case", Location{ProviderGitHub, "Octo-Org", "Octo-Org/API"}, []string{"github"}, true},
		{"github org in any case", Location{ProviderGitHub, "Octo-Org", "Octo-Org/Web"}, []string{"github", "jira"}, true},
		{"sentry project", Location{ProviderSentry, "", "backend"}, []string{"github"}, true},
		{"openproject project", Location{ProviderOpenProject, "", "ops"}, []string{"jira"}, true},
		{"no location", Location{}, nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, bound := p.ServersAt(tt.loc)
			if bound != tt.bound || !slices.Equal(got, tt.want) {
				t.Errorf("ServersAt(%s) = %v, %t; want %v, %t", tt.loc, got, bound, tt.want, tt.bound)
			}
		})
	}
	if !p.OfferedAt(Location{ProviderSlack, "T0OTHER", "C1"}, "anything") || p.OfferedAt(Location{ProviderSlack, "T0ACME", "C0OPS"}, "github") {
		t.Error("OfferedAt: want any server where nothing is bound, only the bound ones elsewhere")
	}
}

func TestRoleOf(t *testing.T) {
	t.Parallel()
	p := parseIssuePolicy(t)
	groups := map[string][]string{"S0ONCALLGROUP": {"U0INGROUP"}}
	inGroup := func(g, u string) bool { return slices.Contains(groups[g], u) }
	tests := []struct{ provider, id, want string }{
		{ProviderSlack, "U0ONCALL", "oncall"}, // first role in file order
		{ProviderSlack, "U0VIEWER", "viewer"},
		{ProviderSlack, "U0INGROUP", "oncall"},
		{ProviderSlack, "U0NOBODY", ""},
		{ProviderGitHub, "OctoCat", "oncall"},
		{ProviderGitHub, "U0ONCALL", ""},
		{ProviderSlack, "", ""},
	}
	for _, tt := range tests {
		if got := p.RoleOf(tt.provider, tt.id, inGroup); got != tt.want {
			t.Errorf("RoleOf(%s, %q) = %q, want %q", tt.provider, tt.id, got, tt.want)
		}
	}
	if got := p.RoleOf(ProviderSlack, "U0INGROUP", nil); got != "" {
		t.Errorf("RoleOf without group lookup = %q, want none", got)
	}
}

func TestVerbCapabilities(t *testing.T) {
	t.Parallel()
	p := parseIssuePolicy(t)
	tests := []struct {
		role, server, tool string
		readOnly, want     bool
	}{
		{"oncall", "github", "get_issue", true, true},
		{"oncall", "github", "create_issue", false, false},
		{"oncall", "everything", "echo", false, true},
		{"viewer", "everything", "echo", false, true},
		{"viewer", "everything", "get-sum", true, false},
		{"nobody", "everything", "echo", true, false},
		{"", "everything", "echo", true, false},
	}
	for _, tt := range tests {
		if got := p.AllowedTool(tt.role, tt.server, tt.tool, tt.readOnly); got != tt.want {
			t.Errorf("AllowedTool(%s, %s.%s, readOnly %t) = %t, want %t", tt.role, tt.server, tt.tool, tt.readOnly, got, tt.want)
		}
	}
	// Allowed, before the annotations are known, lets a verb grant through.
	if !p.Allowed("oncall", "github", "create_issue") || p.Allowed("oncall", "jira", "x") {
		t.Error("Allowed: want a server's verb grant to pass the name check, another server's not")
	}
}

func TestCheckServers(t *testing.T) {
	t.Parallel()
	p := parseIssuePolicy(t)
	if err := p.CheckServers([]string{"everything", "github", "jira"}); err != nil {
		t.Errorf("CheckServers with every server: %v", err)
	}
	err := p.CheckServers([]string{"everything", "github"})
	if err == nil || !strings.Contains(err.Error(), `bindings[2].servers: server "jira" is not in mcp.json`) {
		t.Errorf("got %v, want the binding naming jira", err)
	}
}
