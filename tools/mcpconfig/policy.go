package mcpconfig

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"regexp"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/relaystation/relay/config"
)

// Budget defaults and bounds.
const (
	DefaultTimeout     = 30 * time.Second
	MinTimeout         = time.Second
	MaxTimeout         = 5 * time.Minute
	DefaultConcurrency = 25
	// DefaultPerSession is the default per-thread session limit.
	DefaultPerSession = 25
)

// Policy is the parsed policy file: who may call what, and how much.
// A Policy is immutable once built and safe for concurrent use.
type Policy struct {
	// Roles maps a role to its capabilities.
	Roles map[string][]Capability
	// RoleOrder lists the roles in file order (RoleOf picks the first).
	RoleOrder []string
	// Members maps a role to the people who hold it.
	Members map[string]Members
	// Bindings map places to servers, in file order.
	Bindings []Binding
	// Budgets are keyed by server ("github") or tool ("github.create_issue").
	Budgets map[string]Budget
	// Limits are global.
	Limits Limits
}

// Budget limits one server or tool. Zero fields mean "no limit" (Timeout:
// the default).
type Budget struct {
	// RPS and Burst form a token bucket.
	RPS   float64
	Burst int
	// Concurrency bounds simultaneous executions.
	Concurrency int
	// Timeout bounds one call, 1s to 5m.
	Timeout time.Duration
	// DailyQuota bounds executions per UTC day.
	DailyQuota int
}

// Limits are the global limits.
type Limits struct {
	// Concurrency bounds executions across all servers; default 25.
	Concurrency int
	// PerSession bounds the executions of one thread (the specification's
	// session limit, counted across runner processes); default 25, -1
	// unlimited.
	PerSession int
	// Stop blocks every new execution.
	Stop bool
}

// Capability is one granted pattern: "<server>.<tool>", "<server>.*",
// "<server>.read", "<server>.write" or "*.*".
type Capability struct {
	Server string // "*" only in "*.*"
	Tool   string // "*" for every tool of Server
}

// String returns the capability as written.
func (c Capability) String() string { return c.Server + "." + c.Tool }

// Matches reports whether the capability grants server.tool.
func (c Capability) Matches(server, tool string) bool {
	return (c.Server == "*" || c.Server == server) && (c.Tool == "*" || c.Tool == tool)
}

// capabilityRE widens the issue's ^[a-z0-9-]+\.(([a-z0-9-]+\.)*[a-z0-9-]+|\*)$
// to the names servers and tools really have (upper case and '_', as in
// read_text_file) and adds the "*.*" grant.
var capabilityRE = regexp.MustCompile(`^(\*\.\*|[A-Za-z0-9_-]+\.(([A-Za-z0-9_-]+\.)*[A-Za-z0-9_-]+|\*))$`)

// ParseCapability parses "<server>.<tool>", "<server>.*" or "*.*".
func ParseCapability(s string) (Capability, error) {
	if !capabilityRE.MatchString(s) {
		return Capability{}, fmt.Errorf("capability %q: want <server>.<tool>, <server>.* or *.*", s)
	}
	server, tool, _ := strings.Cut(s, ".")
	return Capability{Server: server, Tool: tool}, nil
}

// SplitTool splits "<server>.<tool>" at its first dot.
func SplitTool(name string) (server, tool string, ok bool) {
	server, tool, ok = strings.Cut(name, ".")
	return server, tool, ok && server != "" && tool != ""
}

// DefaultPolicy grants nothing: without a policy file every call is denied.
func DefaultPolicy() *Policy {
	return &Policy{Roles: map[string][]Capability{}, Budgets: map[string]Budget{}, Limits: Limits{Concurrency: DefaultConcurrency, PerSession: DefaultPerSession}}
}

// Allowed reports whether role may call server.tool as far as the name
// tells: an exact or "*" grant, or a verb grant ("<server>.read",
// "<server>.write") of the server, which AllowedTool decides once the
// tool's annotations are known. An empty role is never allowed.
func (p *Policy) Allowed(role, server, tool string) bool {
	if role == "" {
		return false
	}
	for _, c := range p.Roles[role] {
		if c.Matches(server, tool) || ((c.Tool == VerbRead || c.Tool == VerbWrite) && (c.Server == "*" || c.Server == server)) {
			return true
		}
	}
	return false
}

// Budget returns the budget of a server or of "server.tool" (zero when none).
func (p *Policy) Budget(key string) Budget { return p.Budgets[key] }

// Timeout is the call timeout of server.tool: the tool's budget, else the
// server's, else DefaultTimeout.
func (p *Policy) Timeout(server, tool string) time.Duration {
	return p.TimeoutOr(server, tool, 0)
}

// TimeoutOr is Timeout with def (a server entry's own timeout) used before
// DefaultTimeout when no budget sets one; def 0 means DefaultTimeout.
func (p *Policy) TimeoutOr(server, tool string, def time.Duration) time.Duration {
	if t := p.Budgets[server+"."+tool].Timeout; t > 0 {
		return t
	}
	if t := p.Budgets[server].Timeout; t > 0 {
		return t
	}
	if def > 0 {
		return def
	}
	return DefaultTimeout
}

// TimeoutSource names where TimeoutOr(server, tool, def) takes the limit
// from, as error messages say it.
func (p *Policy) TimeoutSource(server, tool string, def time.Duration) string {
	switch {
	case p.Budgets[server+"."+tool].Timeout > 0:
		return "the timeout of policy budget " + server + "." + tool
	case p.Budgets[server].Timeout > 0:
		return "the timeout of policy budget " + server
	case def > 0:
		return `the "timeout" of server ` + server + " in mcp.json"
	}
	return fmt.Sprintf("the default %s; a policy budget's timeout or the server's \"timeout\" in mcp.json sets another", DefaultTimeout)
}

type rawPolicy struct {
	Roles    []rawRole            `json:"roles"`
	Bindings []rawBinding         `json:"bindings"`
	Budgets  map[string]rawBudget `json:"budgets"`
	Limits   struct {
		Concurrency int  `json:"concurrency"`
		PerSession  *int `json:"perSession"`
		Stop        bool `json:"stop"`
	} `json:"limits"`
}

// rawRole is one entry of the policy file's roles.
type rawRole struct {
	Role         string   `json:"role"`
	Description  string   `json:"description"`
	Capabilities []string `json:"capabilities"`
	Members      Members  `json:"members"`
}

// rawBudget is one entry of the policy file's budgets.
type rawBudget struct {
	RPS         float64 `json:"rps"`
	Burst       int     `json:"burst"`
	Concurrency int     `json:"concurrency"`
	Timeout     string  `json:"timeout"`
	DailyQuota  int     `json:"daily_quota"`
}

// LoadPolicy reads and validates the policy file at path (YAML or JSON).
func LoadPolicy(path string) (*Policy, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read policy: %w", err)
	}
	p, err := ParsePolicy(data)
	if err != nil {
		return nil, withPath(err, path)
	}
	return p, nil
}

// ParsePolicy validates a policy document (YAML or JSON, JSON being YAML)
// against schemas/policy.schema.json and the Go checks.
func ParsePolicy(data []byte) (*Policy, error) {
	r, err := decodePolicy(data)
	if err != nil {
		return nil, err
	}
	p := DefaultPolicy()
	p.Members = map[string]Members{}
	var errs []error
	fail := func(field, format string, args ...any) {
		errs = append(errs, &ValidationError{Field: field, Reason: fmt.Sprintf(format, args...)})
	}
	p.addRoles(r.Roles, fail)
	p.addBindings(r.Bindings, fail)
	p.addBudgets(r.Budgets, fail)
	if r.Limits.Concurrency > 0 {
		p.Limits.Concurrency = r.Limits.Concurrency
	}
	if r.Limits.PerSession != nil {
		p.Limits.PerSession = *r.Limits.PerSession
	}
	p.Limits.Stop = r.Limits.Stop
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return p, nil
}

// decodePolicy reads YAML or JSON, validates it against PolicySchema and
// decodes it.
func decodePolicy(data []byte) (*rawPolicy, error) {
	var doc any
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, &ValidationError{Reason: "not YAML or JSON: " + err.Error()}
	}
	if doc == nil {
		doc = map[string]any{}
	}
	doc, err := jsonCompatible(doc)
	if err != nil {
		return nil, &ValidationError{Reason: err.Error()}
	}
	js, err := json.Marshal(doc)
	if err != nil {
		return nil, &ValidationError{Reason: err.Error()}
	}
	if err := validateSchema(PolicySchema, js); err != nil {
		return nil, err
	}
	var r rawPolicy
	if err := json.Unmarshal(js, &r); err != nil {
		return nil, &ValidationError{Reason: err.Error()}
	}
	return &r, nil
}

// addRoles adds the roles with their capabilities and members; fail records
// a problem with a field.
func (p *Policy) addRoles(roles []rawRole, fail func(field, format string, args ...any)) {
	for i, role := range roles {
		if _, dup := p.Roles[role.Role]; dup {
			fail(fmt.Sprintf("roles[%d].role", i), "role %q defined twice", role.Role)
			continue
		}
		caps := make([]Capability, 0, len(role.Capabilities))
		for j, s := range role.Capabilities {
			c, err := ParseCapability(s)
			if err != nil {
				fail(fmt.Sprintf("roles[%d].capabilities[%d]", i, j), "%v", err)
				continue
			}
			caps = append(caps, c)
		}
		if len(role.Capabilities) == 0 {
			fail(fmt.Sprintf("roles[%d].capabilities", i), "role %q grants nothing: list at least one capability", role.Role)
		}
		p.Roles[role.Role] = caps
		p.RoleOrder = append(p.RoleOrder, role.Role)
		p.Members[role.Role] = role.Members
	}
}

// addBudgets adds the budgets by server or tool; fail records a problem
// with a field.
func (p *Policy) addBudgets(budgets map[string]rawBudget, fail func(field, format string, args ...any)) {
	for key, b := range budgets {
		field := "budgets." + key
		bud := Budget{RPS: b.RPS, Burst: b.Burst, Concurrency: b.Concurrency, DailyQuota: b.DailyQuota}
		if b.Timeout != "" {
			d, err := time.ParseDuration(b.Timeout)
			if err != nil || d < MinTimeout || d > MaxTimeout {
				fail(field+".timeout", "%q is not a duration from %s to %s", b.Timeout, MinTimeout, MaxTimeout)
			}
			bud.Timeout = d
		}
		if bud.RPS > 0 && bud.Burst == 0 {
			bud.Burst = int(math.Max(1, math.Ceil(bud.RPS)))
		}
		if bud.Burst > 0 && bud.RPS == 0 {
			fail(field+".burst", "needs rps")
		}
		p.Budgets[key] = bud
	}
}

// jsonCompatible turns YAML's decoded values into what encoding/json accepts.
func jsonCompatible(v any) (any, error) {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			c, err := jsonCompatible(e)
			if err != nil {
				return nil, err
			}
			x[k] = c
		}
		return x, nil
	case map[any]any:
		m := make(map[string]any, len(x))
		for k, e := range x {
			ks, ok := k.(string)
			if !ok {
				return nil, fmt.Errorf("key %v is not a string", k)
			}
			c, err := jsonCompatible(e)
			if err != nil {
				return nil, err
			}
			m[ks] = c
		}
		return m, nil
	case []any:
		for i, e := range x {
			c, err := jsonCompatible(e)
			if err != nil {
				return nil, err
			}
			x[i] = c
		}
		return x, nil
	case float64:
		if math.IsInf(x, 0) || math.IsNaN(x) {
			return nil, fmt.Errorf("number %v is not allowed", x)
		}
		return x, nil
	case time.Time:
		return x.Format(time.RFC3339), nil
	}
	return v, nil
}

// ReadPolicySetting reads the policy file RELAY_POLICY names (the tool
// runner's) for the services that follow its roles, members and bindings
// (the agent, the approvals worker); nil when unset. A bad file is recorded
// in env.
func ReadPolicySetting(env *config.Env) *Policy {
	path := env.String("RELAY_POLICY", "")
	if path == "" {
		return nil
	}
	p, err := LoadPolicy(path)
	if err != nil {
		env.Failf("RELAY_POLICY", "%v", err)
		return nil
	}
	return p
}
