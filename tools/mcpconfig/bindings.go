package mcpconfig

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Providers a member or a binding names.
const (
	ProviderSlack       = "slack"
	ProviderGitHub      = "github"
	ProviderSentry      = "sentry"
	ProviderOpenProject = "openproject"
)

// Capability verbs: "<server>.read" grants the server's tools annotated
// readOnlyHint, "<server>.write" the others.
const (
	VerbRead  = "read"
	VerbWrite = "write"
)

// Members are the people who hold a role.
type Members struct {
	// Slack holds user ids (U…, W…) and user-group ids (S…).
	Slack []string `json:"slack,omitempty"`
	// GitHub holds logins, compared case-insensitively.
	GitHub []string `json:"github,omitempty"`
}

// Location is where a message was written: a provider, its parent scope
// (Slack workspace, GitHub organisation; "" where the provider has none) and
// the place itself (Slack channel, GitHub "owner/repo", Sentry or
// OpenProject project).
type Location struct {
	Provider string `json:"provider"`
	Parent   string `json:"parent,omitempty"`
	Place    string `json:"place,omitempty"`
}

// IsZero reports whether l names no place.
func (l Location) IsZero() bool { return l.Provider == "" }

// String is "provider:parent/place".
func (l Location) String() string { return l.Provider + ":" + l.Parent + "/" + l.Place }

// Binding maps one place to the MCP servers offered there.
type Binding struct {
	// Location names the place: Parent set and Place empty for a workspace or
	// organisation, Place set for a channel, repository or project.
	Location Location
	// Servers are the servers offered there.
	Servers []string
	// Inherit makes a workspace's or organisation's binding apply to its
	// channels or repositories that have none of their own.
	Inherit bool
}

// InGroup reports whether a Slack user belongs to a Slack user group.
type InGroup func(group, user string) bool

// RoleOf returns the first role (in file order) whose members include the
// person id of provider ("slack": a user id, "github": a login); "" when
// none does. inGroup answers Slack user-group membership; nil skips groups.
func (p *Policy) RoleOf(provider, id string, inGroup InGroup) string {
	if id == "" {
		return ""
	}
	for _, role := range p.RoleOrder {
		if p.Members[role].has(provider, id, inGroup) {
			return role
		}
	}
	return ""
}

func (m Members) has(provider, id string, inGroup InGroup) bool {
	switch provider {
	case ProviderSlack:
		for _, s := range m.Slack {
			if s == id || (strings.HasPrefix(s, "S") && inGroup != nil && inGroup(s, id)) {
				return true
			}
		}
	case ProviderGitHub:
		for _, s := range m.GitHub {
			if strings.EqualFold(s, id) {
				return true
			}
		}
	}
	return false
}

// ServersAt returns the servers bound to l and true, or nil and false when
// no binding applies (the role's servers then). A binding of the place
// itself wins; else the parent's, when it has inheritToChildren.
func (p *Policy) ServersAt(l Location) ([]string, bool) {
	if l.IsZero() {
		return nil, false
	}
	var parent *Binding
	for i := range p.Bindings {
		b := &p.Bindings[i]
		if b.Location.Provider != l.Provider {
			continue
		}
		switch {
		case l.Place != "" && sameName(l.Provider, b.Location.Place, l.Place):
			return b.Servers, true
		case b.Location.Place == "" && b.Location.Parent != "" && sameName(l.Provider, b.Location.Parent, l.Parent):
			if l.Place == "" || b.Inherit {
				parent = b
			}
		}
	}
	if parent != nil {
		return parent.Servers, true
	}
	return nil, false
}

// sameName compares two names of a provider's places: GitHub owners and
// repositories in any case (as GitHub does), the others exactly.
func sameName(provider, a, b string) bool {
	if provider == ProviderGitHub {
		return strings.EqualFold(a, b)
	}
	return a == b
}

// OfferedAt reports whether server may be used at l: always without a
// binding, else when the binding names it.
func (p *Policy) OfferedAt(l Location, server string) bool {
	servers, bound := p.ServersAt(l)
	return !bound || slices.Contains(servers, server)
}

// AllowedTool reports whether role may call server.tool, readOnly being the
// tool's readOnlyHint (for the verb capabilities).
func (p *Policy) AllowedTool(role, server, tool string, readOnly bool) bool {
	if role == "" {
		return false
	}
	for _, c := range p.Roles[role] {
		if c.MatchesTool(server, tool, readOnly) {
			return true
		}
	}
	return false
}

// MatchesTool reports whether the capability grants server.tool, whose
// readOnlyHint is readOnly: exact names and "*" as Matches, "read" and
// "write" as verbs.
func (c Capability) MatchesTool(server, tool string, readOnly bool) bool {
	if c.Server != "*" && c.Server != server {
		return false
	}
	switch c.Tool {
	case "*", tool:
		return true
	case VerbRead:
		return readOnly
	case VerbWrite:
		return !readOnly
	}
	return false
}

// CheckServers reports bindings that name a server not in names (the
// servers of mcp.json), one error per binding.
func (p *Policy) CheckServers(names []string) error {
	var errs []error
	for i, b := range p.Bindings {
		for _, s := range b.Servers {
			if !slices.Contains(names, s) {
				errs = append(errs, &ValidationError{Field: fmt.Sprintf("bindings[%d].servers", i),
					Reason: fmt.Sprintf("server %q is not in mcp.json (have: %s)", s, strings.Join(names, ", "))})
			}
		}
	}
	return errors.Join(errs...)
}

// rawBinding is a binding as written.
type rawBinding struct {
	Slack *struct {
		Team    string `json:"team"`
		Channel string `json:"channel"`
	} `json:"slack"`
	GitHub *struct {
		Org  string `json:"org"`
		Repo string `json:"repo"`
	} `json:"github"`
	Sentry *struct {
		Project string `json:"project"`
	} `json:"sentry"`
	OpenProject *struct {
		Project string `json:"project"`
	} `json:"openproject"`
	Servers []string `json:"servers"`
	Inherit bool     `json:"inheritToChildren"`
}

// binding turns a raw binding into a Binding; the schema has checked the
// selectors' shapes, this checks that exactly one place is named and that a
// repository lies in a well-formed owner.
func (r rawBinding) binding() (Binding, error) {
	var locs []Location
	if s := r.Slack; s != nil {
		locs = append(locs, Location{Provider: ProviderSlack, Parent: s.Team, Place: s.Channel})
	}
	if g := r.GitHub; g != nil {
		l := Location{Provider: ProviderGitHub, Parent: g.Org, Place: g.Repo}
		if g.Repo != "" {
			l.Parent, _, _ = strings.Cut(g.Repo, "/")
		}
		locs = append(locs, l)
	}
	if s := r.Sentry; s != nil {
		locs = append(locs, Location{Provider: ProviderSentry, Place: s.Project})
	}
	if o := r.OpenProject; o != nil {
		locs = append(locs, Location{Provider: ProviderOpenProject, Place: o.Project})
	}
	if len(locs) != 1 {
		return Binding{}, fmt.Errorf("names %d places, want exactly one of slack, github, sentry, openproject", len(locs))
	}
	l := locs[0]
	if l.Place != "" && l.Provider != ProviderGitHub {
		l.Parent = "" // a channel binding holds whatever workspace it is in
	}
	return Binding{Location: l, Servers: r.Servers, Inherit: r.Inherit}, nil
}

// addBindings parses the raw bindings into p; a place bound twice is an error.
func (p *Policy) addBindings(raw []rawBinding, fail func(field, format string, args ...any)) {
	seen := map[Location]int{}
	for i, rb := range raw {
		field := fmt.Sprintf("bindings[%d]", i)
		b, err := rb.binding()
		if err != nil {
			fail(field, "%v", err)
			continue
		}
		key := b.Location
		if key.Provider == ProviderGitHub {
			key.Parent, key.Place = strings.ToLower(key.Parent), strings.ToLower(key.Place)
		}
		if j, dup := seen[key]; dup {
			fail(field, "binds %s again (bindings[%d] already does)", b.Location, j)
			continue
		}
		seen[key] = i
		p.Bindings = append(p.Bindings, b)
	}
}
