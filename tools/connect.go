package tools

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/relaystation/relay/secret"
	"github.com/relaystation/relay/tools/mcpconfig"
)

// ConnectLinkTTL is how long a `/relay connect` link may be opened.
const ConnectLinkTTL = 10 * time.Minute

// Errors of connection links.
var (
	// ErrLinkInvalid: the link is not one the relay signed (or was changed).
	ErrLinkInvalid = errors.New("this connection link is not valid: ask for a new one with /relay connect")
	// ErrLinkExpired: the link is older than ConnectLinkTTL.
	ErrLinkExpired = errors.New("this connection link has expired (links last 10 minutes): ask for a new one with /relay connect")
	// ErrLinkUsed: the link was opened before (links are single use).
	ErrLinkUsed = errors.New("this connection link was used already (links are single use): ask for a new one with /relay connect")
	// ErrNoFlow: a callback arrived for no connection under way.
	ErrNoFlow = errors.New("no connection is under way for this redirect (it finished, failed or expired): start again")
)

// ConnectLink is what a signed connection link says: who connects which
// server, until when; Nonce makes it single use.
type ConnectLink struct {
	Server    string    `json:"s"`
	Principal string    `json:"p"`
	Nonce     string    `json:"n"`
	Expires   time.Time `json:"e"`
}

// LinkSigner signs and checks connection links with a key derived
// (HKDF-SHA256) from RELAY_SECRET_KEY, so every relay process with that key
// agrees on them. Safe for concurrent use.
type LinkSigner struct {
	key []byte
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// NewLinkSigner derives the signing key from key (RELAY_SECRET_KEY).
func NewLinkSigner(key secret.Value) (*LinkSigner, error) {
	k, err := deriveKey(key, "relay connect link v1")
	if err != nil {
		return nil, err
	}
	return &LinkSigner{key: k}, nil
}

func (s *LinkSigner) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

// Sign returns the token of a link letting principal connect server, valid
// for ConnectLinkTTL.
func (s *LinkSigner) Sign(server, principal string) string {
	l := ConnectLink{Server: server, Principal: principal, Nonce: rand.Text(), Expires: s.now().Add(ConnectLinkTTL).UTC().Truncate(time.Second)}
	payload, _ := json.Marshal(l)
	p := base64.RawURLEncoding.EncodeToString(payload)
	return p + "." + base64.RawURLEncoding.EncodeToString(s.mac(p))
}

func (s *LinkSigner) mac(p string) []byte {
	m := hmac.New(sha256.New, s.key)
	m.Write([]byte(p))
	return m.Sum(nil)
}

// Verify checks token's signature and expiry (not its single use: see
// LinkNonces).
func (s *LinkSigner) Verify(token string) (*ConnectLink, error) {
	p, sig, ok := strings.Cut(token, ".")
	if !ok {
		return nil, ErrLinkInvalid
	}
	got, err := base64.RawURLEncoding.DecodeString(sig)
	if err != nil || !hmac.Equal(got, s.mac(p)) {
		return nil, ErrLinkInvalid
	}
	payload, err := base64.RawURLEncoding.DecodeString(p)
	if err != nil {
		return nil, ErrLinkInvalid
	}
	var l ConnectLink
	if err := json.Unmarshal(payload, &l); err != nil || l.Server == "" || l.Principal == "" || l.Nonce == "" {
		return nil, ErrLinkInvalid
	}
	if !s.now().Before(l.Expires) {
		return nil, ErrLinkExpired
	}
	return &l, nil
}

// LinkNonces remembers the connection links opened, so each opens once.
type LinkNonces interface {
	// Use marks nonce used until expires; ErrLinkUsed when it was before.
	Use(ctx context.Context, nonce string, expires time.Time) error
}

// MemoryNonces are LinkNonces of one process (a console without a bus,
// tests). Safe for concurrent use.
type MemoryNonces struct {
	mu sync.Mutex
	m  map[string]time.Time
}

// Use implements LinkNonces.
func (n *MemoryNonces) Use(_ context.Context, nonce string, expires time.Time) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	now := time.Now()
	for k, exp := range n.m {
		if now.After(exp) {
			delete(n.m, k)
		}
	}
	if n.m == nil {
		n.m = map[string]time.Time{}
	}
	if _, used := n.m[nonce]; used {
		return ErrLinkUsed
	}
	n.m[nonce] = expires
	return nil
}

// Connector runs the authorization code flow for the console: the
// redirect comes to the console's /oauth/callback (Finish), the grant is
// stored for the principal who connects (a Slack user for a per-user
// server, PrincipalTeam otherwise). Safe for concurrent use.
type Connector struct {
	// Runner supplies the HTTP client and client name of the flows.
	Runner Config
	// Servers are the mcp.json entries that may be connected.
	Servers []mcpconfig.Server
	// Tokens keeps the grants.
	Tokens TokenStore
	// ClientMetadataURL is RELAY_OAUTH_CLIENT_METADATA_URL.
	ClientMetadataURL string
	// Links checks the signed links of `/relay connect`; Nonces makes them
	// single use.
	Links  *LinkSigner
	Nonces LinkNonces
	// Timeout bounds one flow, from Start to its callback. Default
	// ConnectLinkTTL.
	Timeout time.Duration

	mu    sync.Mutex
	flows map[string]*flow // by the authorization request's state
}

type flow struct {
	login             *Login
	server, principal string
	done              chan error
}

// Server is the entry named name.
func (c *Connector) Server(name string) (mcpconfig.Server, bool) {
	for _, s := range c.Servers {
		if s.Name == name {
			return s, true
		}
	}
	return mcpconfig.Server{}, false
}

// Redeem checks a signed link and uses it up: its server and principal.
func (c *Connector) Redeem(ctx context.Context, token string) (*ConnectLink, error) {
	if c.Links == nil || c.Nonces == nil {
		return nil, errors.New("connection links are not available here (RELAY_SECRET_KEY is not set)")
	}
	l, err := c.Links.Verify(token)
	if err != nil {
		return nil, err
	}
	if err := c.Nonces.Use(ctx, l.Nonce, l.Expires); err != nil {
		return nil, err
	}
	return l, nil
}

// Start begins principal's connection to server with redirectURL (the
// console's /oauth/callback) and returns the authorization URL to send the
// browser to. The flow runs until Finish gets its redirect, or Timeout.
func (c *Connector) Start(ctx context.Context, redirectURL, server, principal string) (string, error) {
	s, ok := c.Server(server)
	if !ok {
		return "", fmt.Errorf("%w: %s", ErrUnknownServer, server)
	}
	if !mcpconfig.Remote(s.Type) {
		return "", fmt.Errorf("server %s: connecting works on remote servers (type http or sse), not %s", s.Name, s.Type)
	}
	principal = cmpOr(principal, PrincipalTeam)
	if principal != PrincipalTeam && !PerUser(s) {
		return "", fmt.Errorf("server %s is connected once for the team, not per person (its entry has no \"oauth\": {\"per\": \"user\"})", s.Name)
	}
	timeout := c.Timeout
	if timeout <= 0 {
		timeout = ConnectLinkTTL
	}
	urls := make(chan string, 1)
	l := &Login{External: true, RedirectURL: redirectURL, Timeout: timeout, Open: func(_ context.Context, u string) error {
		select {
		case urls <- u:
		default:
		}
		return nil
	}}
	f := &flow{login: l, server: s.Name, principal: principal, done: make(chan error, 1)}
	cfg := c.Runner
	cfg.OAuth = &OAuthConfig{Tokens: c.Tokens, Login: l, ClientMetadataURL: c.ClientMetadataURL, Principal: principal}
	// The flow outlives the request that started it.
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout+30*time.Second)
	go func() {
		defer cancel()
		err := LoginServer(fctx, cfg, s)
		c.forget(f)
		f.done <- err
	}()
	select {
	case u := <-urls:
		pu, err := url.Parse(u)
		if err != nil {
			cancel()
			return "", err
		}
		c.mu.Lock()
		if c.flows == nil {
			c.flows = map[string]*flow{}
		}
		c.flows[pu.Query().Get("state")] = f
		c.mu.Unlock()
		return u, nil
	case err := <-f.done:
		if err == nil {
			err = fmt.Errorf("server %s: connected without a browser", s.Name)
		}
		return "", err
	case <-ctx.Done():
		cancel()
		return "", ctx.Err()
	}
}

func (c *Connector) forget(f *flow) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, v := range c.flows {
		if v == f {
			delete(c.flows, k)
		}
	}
}

// Finish takes the authorization server's redirect (its query) and waits
// for the flow to store the grant: the server and principal connected.
func (c *Connector) Finish(ctx context.Context, q url.Values) (server, principal string, err error) {
	c.mu.Lock()
	f := c.flows[q.Get("state")]
	delete(c.flows, q.Get("state"))
	c.mu.Unlock()
	if f == nil {
		return "", "", ErrNoFlow
	}
	if _, err := f.login.Deliver(q); err != nil {
		return f.server, f.principal, err
	}
	select {
	case err := <-f.done:
		return f.server, f.principal, err
	case <-ctx.Done():
		return f.server, f.principal, ctx.Err()
	}
}

// Disconnect revokes and deletes principal's grant of server.
func (c *Connector) Disconnect(ctx context.Context, server, principal string) (revoked bool, err error) {
	if _, ok := c.Server(server); !ok {
		return false, fmt.Errorf("%w: %s", ErrUnknownServer, server)
	}
	client := c.Runner.HTTPClient
	if client == nil {
		client = http.DefaultClient
	}
	return LogoutServer(ctx, c.Tokens, client, server, principal)
}

// Connected reports whether principal has a grant stored for server.
// People are the Slack users who connected their own account to per-user
// server (sorted; none when the token store cannot list them).
func (c *Connector) People(ctx context.Context, server string) []string {
	pl, ok := c.Tokens.(PrincipalLister)
	if !ok {
		return nil
	}
	people, err := pl.Principals(ctx, server)
	if err != nil {
		return nil
	}
	slices.Sort(people)
	return people
}

func (c *Connector) Connected(ctx context.Context, server, principal string) bool {
	_, _, err := c.Tokens.Load(ctx, server, cmpOr(principal, PrincipalTeam))
	return err == nil
}
