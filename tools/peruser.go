package tools

import (
	"context"
	"errors"
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
