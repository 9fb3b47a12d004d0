package tools

import (
	"context"
	"encoding/base64"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/relaystation/relay/tools/mcpconfig"
)

// Per-person connections (`"oauth": {"per": "user"}`, docs/oauth.md): each
// person connects their own account, and a call on such a server runs on a
// session of its own that carries the grant of the call's principal
// (Request.Principal), never anyone else's.

// PerUser reports whether s connects each person's own account.
func PerUser(s mcpconfig.Server) bool { return s.OAuth != nil && s.OAuth.Per == "user" }

// ConnectCommand is what a person runs in Slack to connect server.
func ConnectCommand(server string) string { return "/relay connect " + server }

type principalKey struct{}

// withPrincipal makes dials under ctx use principal's grant.
func withPrincipal(ctx context.Context, principal string) context.Context {
	return context.WithValue(ctx, principalKey{}, principal)
}

func principalFrom(ctx context.Context) string {
	p, _ := ctx.Value(principalKey{}).(string)
	return p
}

// userConns are the per-person connections of a per-user server's conn.
type userConns struct {
	mu sync.Mutex
	m  map[string]*conn
}

// forPrincipal is the connection of principal on per-user server c,
// connected (lazily, on its first call) with principal's grant. Without a
// principal, or without their grant, it is a *NeedsLoginError naming them.
func (c *conn) forPrincipal(ctx context.Context, principal string) (*conn, error) {
	if principal == "" || principal == PrincipalTeam {
		return nil, &NeedsLoginError{Server: c.cfg.Name, PerUser: true}
	}
	c.users.mu.Lock()
	if c.users.m == nil {
		c.users.m = map[string]*conn{}
	}
	uc := c.users.m[principal]
	if uc == nil {
		uc = newConn(c.r, c.cfg)
		uc.principal = principal
		uc.log = c.log.With("principal", principal)
		c.users.m[principal] = uc
	}
	c.users.mu.Unlock()
	if err := uc.ensureSession(ctx); err != nil {
		return nil, err
	}
	return uc, nil
}

// ensureSession connects a per-person connection that has no session (it
// has no health loop: its calls connect it).
func (c *conn) ensureSession(ctx context.Context) error {
	c.dialMu.Lock()
	defer c.dialMu.Unlock()
	c.mu.Lock()
	up := c.session != nil
	c.mu.Unlock()
	if up {
		return nil
	}
	err := c.connect(withPrincipal(ctx, c.principal))
	var lerr *NeedsLoginError
	if errors.As(err, &lerr) {
		return lerr
	}
	return err
}

// closeUsers ends every per-person session of c.
func (c *conn) closeUsers() {
	c.users.mu.Lock()
	list := make([]*conn, 0, len(c.users.m))
	for _, uc := range c.users.m {
		list = append(list, uc)
	}
	c.users.m = nil
	c.users.mu.Unlock()
	for _, uc := range list {
		uc.close()
	}
}

// DropPrincipal closes principal's session on server (after a logout), so
// the next call connects again with whatever grant is stored then.
func (r *Runner) DropPrincipal(server, principal string) {
	c := r.conn(server)
	if c == nil {
		return
	}
	c.users.mu.Lock()
	uc := c.users.m[principal]
	delete(c.users.m, principal)
	c.users.mu.Unlock()
	if uc != nil {
		uc.close()
	}
}

// PrincipalLister is a TokenStore that can say who has a grant of a
// server (every store of the relay is one).
type PrincipalLister interface {
	Principals(ctx context.Context, server string) ([]string, error)
}

// userTools is the tool list of per-user server c, which has no session of
// its own: read through the session of a person who connected (their own
// session, which their calls use next). nil when nobody has connected.
func (c *conn) userTools(ctx context.Context) []*toolEntry {
	c.users.mu.Lock()
	var up []*conn
	for _, uc := range c.users.m {
		up = append(up, uc)
	}
	c.users.mu.Unlock()
	for _, uc := range up {
		if list, ok := uc.freshTools(); ok && len(list) > 0 {
			return list
		}
	}
	oc := c.r.cfg.OAuth
	pl, ok := oc.Tokens.(PrincipalLister)
	if !ok {
		return nil
	}
	people, err := pl.Principals(ctx, c.cfg.Name)
	if err != nil {
		return nil
	}
	for _, p := range people {
		uc, err := c.forPrincipal(ctx, p)
		if err != nil {
			continue
		}
		if list, err := uc.cachedTools(ctx); err == nil && len(list) > 0 {
			return list
		}
	}
	return nil
}

// principalOfKey is the principal of a GrantKey, "" when key is not one.
func principalOfKey(key string) string {
	parts := strings.Split(key, ".")
	if len(parts) != 4 || parts[0] != "t" {
		return ""
	}
	b, err := base64.RawURLEncoding.DecodeString(parts[3])
	if err != nil {
		return ""
	}
	return string(b)
}

// PrincipalsOfKeys are the distinct principals (not the team) of grant keys.
func PrincipalsOfKeys(keys []string) []string {
	var out []string
	for _, k := range keys {
		if p := principalOfKey(k); p != "" && p != PrincipalTeam && !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	return out
}

// Principals implements PrincipalLister.
func (f *FileTokenStore) Principals(_ context.Context, server string) ([]string, error) {
	matches, err := filepath.Glob(filepath.Join(f.dir, GrantServerFilter(server)))
	if err != nil {
		return nil, err
	}
	for i, m := range matches {
		matches[i] = filepath.Base(m)
	}
	return PrincipalsOfKeys(matches), nil
}
