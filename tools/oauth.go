package tools

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/auth/extauth"
	"github.com/modelcontextprotocol/go-sdk/oauthex"
	"golang.org/x/oauth2"

	"github.com/relaystation/relay/secret"
	"github.com/relaystation/relay/tools/mcpconfig"
)

// OAuthConfig says how a Runner authorizes to remote servers that ask for
// OAuth (see docs/oauth.md).
type OAuthConfig struct {
	// Tokens keeps the grants (a JetStream KV bucket shared by every
	// process on the bus, or a directory for the standalone CLI).
	Tokens TokenStore
	// Login, when set, runs the authorization code flow in this process
	// (`relay mcp login|call`). Nil: a server without a usable grant is in
	// state needs_login.
	Login *Login
	// ClientMetadataURL is RELAY_OAUTH_CLIENT_METADATA_URL: the relay's
	// Client ID Metadata Document, used when the entry names no clientId
	// and the authorization server supports such documents.
	ClientMetadataURL string
	// Principal whose grant is used; "" is PrincipalTeam.
	Principal string
}

// MaxAuthAttempts bounds the authorization flows run for one call.
const MaxAuthAttempts = 3

// ErrAuthAttempts: a call met 401/403 after MaxAuthAttempts logins.
var ErrAuthAttempts = fmt.Errorf("gave up after %d authorization attempts", MaxAuthAttempts)

// refreshSkew refreshes an access token this long before it expires (half
// its lifetime when that is shorter).
const refreshSkew = 30 * time.Second

// due reports whether g's access token is to be refreshed now.
func (g *Grant) due() bool {
	if g.Expiry.IsZero() {
		return false
	}
	skew := refreshSkew
	if life := g.Expiry.Sub(g.Saved); life > 0 && life/2 < skew {
		skew = life / 2
	}
	return time.Until(g.Expiry) <= skew
}

// oauthHandler returns the SDK OAuth handler of remote server s, or nil
// when s needs none: an entry with "oauth" grant client_credentials gets
// the client credentials handler; any other remote server gets the relay's
// handler when the runner has an OAuthConfig (its stored grant, refresh,
// and, in the CLI, the login flow). principal is whose grant it uses; ""
// is the OAuthConfig's Principal, else the team's.
func (r *Runner) oauthHandler(s mcpconfig.Server, principal string) (auth.OAuthHandler, error) {
	client := r.cfg.HTTPClient
	if client == nil {
		client = http.DefaultClient
	}
	if s.OAuth != nil && s.OAuth.Grant == mcpconfig.GrantClientCredentials {
		return clientCredentials(s, client)
	}
	oc := r.cfg.OAuth
	if oc == nil {
		return nil, nil
	}
	rec := &asRecorder{}
	c := wrapClient(client, func(rt http.RoundTripper) http.RoundTripper { return &recordingTransport{base: rt, rec: rec} })
	if s.OAuth != nil && s.OAuth.PrivateKeyFile != "" {
		key, err := loadJWTKey(s.OAuth.PrivateKeyFile)
		if err != nil {
			return nil, fmt.Errorf("server %s: %w", s.Name, err)
		}
		c = wrapClient(c, func(rt http.RoundTripper) http.RoundTripper {
			return &assertionTransport{base: rt, key: key, clientID: s.OAuth.ClientID, audience: rec.issuer}
		})
	}
	return &oauthHandler{server: s, oc: oc, principal: cmpOr(principal, oc.Principal, PrincipalTeam), client: c, rec: rec}, nil
}

func cmpOr(vals ...string) string { return cmp.Or(vals...) }

// clientCredentials is the client credentials handler for s: ours for
// private_key_jwt (oauth_jwt.go), else extauth's with the client secret.
func clientCredentials(s mcpconfig.Server, client *http.Client) (auth.OAuthHandler, error) {
	if s.OAuth.PrivateKeyFile != "" || s.OAuth.TokenEndpointAuth == "private_key_jwt" {
		return newJWTClientCredentials(s, client)
	}
	h, err := extauth.NewClientCredentialsHandler(&extauth.ClientCredentialsHandlerConfig{
		Credentials: &oauthex.ClientCredentials{ClientID: s.OAuth.ClientID,
			ClientSecretAuth: &oauthex.ClientSecretAuth{ClientSecret: s.OAuth.ClientSecret}, Issuer: s.OAuth.Issuer},
		HTTPClient: client,
	})
	if err != nil {
		return nil, fmt.Errorf("server %s: oauth: %w", s.Name, err)
	}
	return h, nil
}

// oauthHandler is the relay's auth.OAuthHandler for one session of one
// server: it sends the stored grant's access token, refreshes it before
// expiry and on 401, and else either reports NeedsLoginError (a running
// relay) or runs the go-sdk's authorization code flow (the CLI).
type oauthHandler struct {
	server    mcpconfig.Server
	oc        *OAuthConfig
	principal string
	client    *http.Client
	rec       *asRecorder
	// fresh ignores the stored grant until a login stored a new one
	// (`relay mcp login`).
	fresh bool

	mu       sync.Mutex
	src      *grantSource
	inner    *auth.AuthorizationCodeHandler
	attempts int
	resource string // of the last authorization request
	scopes   []string
}

var _ auth.OAuthHandler = (*oauthHandler)(nil)

// TokenSource implements auth.OAuthHandler: the stored grant's source, nil
// (no Authorization header) when there is none.
func (h *oauthHandler) TokenSource(ctx context.Context) (oauth2.TokenSource, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.src != nil {
		return h.src, nil
	}
	if h.fresh {
		return nil, nil
	}
	g, rev, err := h.oc.Tokens.Load(ctx, h.server.Name, h.principal)
	if errors.Is(err, ErrNoGrant) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	g.remember()
	h.src = &grantSource{store: h.oc.Tokens, client: h.client, grant: g, rev: rev}
	h.scopes = g.Scopes
	return h.src, nil
}

// Authorize implements auth.OAuthHandler.
func (h *oauthHandler) Authorize(ctx context.Context, req *http.Request, resp *http.Response) error {
	challenges, _ := oauthex.ParseWWWAuthenticate(resp.Header.Values("WWW-Authenticate"))
	berr, scope := "", ""
	for _, c := range challenges {
		if c.Scheme == "bearer" {
			berr, scope = c.Params["error"], c.Params["scope"]
			break
		}
	}
	if resp.StatusCode == http.StatusForbidden && berr != "insufficient_scope" {
		closeBody(resp)
		return nil // not ours: the SDK retries once and reports the 403
	}
	h.mu.Lock()
	src := h.src
	h.mu.Unlock()
	if resp.StatusCode == http.StatusUnauthorized && src != nil {
		sent := strings.TrimSpace(strings.TrimPrefix(req.Header.Get("Authorization"), "Bearer "))
		if err := src.refreshAfter401(ctx, sent); err == nil {
			closeBody(resp)
			return nil
		}
	}
	if h.oc.Login == nil {
		closeBody(resp)
		lerr := &NeedsLoginError{Server: h.server.Name, Scope: scope}
		if PerUser(h.server) {
			lerr.PerUser, lerr.Principal = true, h.principal
		}
		if berr == "insufficient_scope" {
			lerr.Reason = "the server asks for more scopes (" + scope + ")"
		}
		return lerr
	}
	h.mu.Lock()
	if h.attempts >= MaxAuthAttempts {
		h.mu.Unlock()
		closeBody(resp)
		return fmt.Errorf("server %s: %w", h.server.Name, ErrAuthAttempts)
	}
	h.attempts++
	inner, err := h.innerLocked()
	h.mu.Unlock()
	if err != nil {
		closeBody(resp)
		return err
	}
	if err := inner.Authorize(ctx, req, resp); err != nil {
		return fmt.Errorf("server %s: authorization: %w", h.server.Name, err)
	}
	return nil
}

func closeBody(resp *http.Response) {
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
}

// innerLocked builds the go-sdk authorization code handler (h.mu held).
func (h *oauthHandler) innerLocked() (*auth.AuthorizationCodeHandler, error) {
	if h.inner != nil {
		return h.inner, nil
	}
	redirect, err := h.oc.Login.redirectURL()
	if err != nil {
		return nil, err
	}
	o := h.server.OAuth
	if o == nil {
		o = &mcpconfig.OAuth{}
	}
	cfg := &auth.AuthorizationCodeHandlerConfig{
		RedirectURL: redirect,
		AuthorizationCodeFetcher: func(ctx context.Context, args *auth.AuthorizationArgs) (*auth.AuthorizationResult, error) {
			if err := h.rec.checkS256(args.URL); err != nil {
				return nil, err
			}
			if u, err := url.Parse(args.URL); err == nil {
				h.mu.Lock()
				h.resource = u.Query().Get("resource")
				h.mu.Unlock()
			}
			return h.oc.Login.fetch(ctx, h.server.Name, args.URL)
		},
		DynamicClientRegistrationConfig: &auth.DynamicClientRegistrationConfig{Metadata: &oauthex.ClientRegistrationMetadata{
			RedirectURIs: []string{redirect}, ClientName: "relay (" + h.server.Name + ")",
			GrantTypes: []string{"authorization_code", "refresh_token"}, ResponseTypes: []string{"code"},
			TokenEndpointAuthMethod: dcrAuthMethod(o.TokenEndpointAuth),
		}},
		ScopeFilter: func(discovered []string) []string {
			h.mu.Lock()
			defer h.mu.Unlock()
			return unionScopes(h.scopes, o.Scopes, discovered)
		},
		RequestRefreshToken: true,
		Client:              h.client,
		NewTokenSource: func(ctx context.Context, c *oauth2.Config, tok *oauth2.Token) (oauth2.TokenSource, error) {
			return h.store(ctx, c, tok)
		},
	}
	if o.ClientID != "" {
		cc := &oauthex.ClientCredentials{ClientID: o.ClientID, Issuer: o.Issuer}
		if o.ClientSecret != "" {
			cc.ClientSecretAuth = &oauthex.ClientSecretAuth{ClientSecret: o.ClientSecret}
		}
		cfg.PreregisteredClient = cc
	} else if h.oc.ClientMetadataURL != "" {
		cfg.ClientIDMetadataDocumentConfig = &auth.ClientIDMetadataDocumentConfig{URL: h.oc.ClientMetadataURL}
	}
	inner, err := auth.NewAuthorizationCodeHandler(cfg)
	if err != nil {
		return nil, fmt.Errorf("server %s: oauth: %w", h.server.Name, err)
	}
	h.inner = inner
	return inner, nil
}

func dcrAuthMethod(m string) string {
	if m == "private_key_jwt" {
		return ""
	}
	return m
}

// store saves the tokens of a finished login as the grant and returns its
// source.
func (h *oauthHandler) store(ctx context.Context, c *oauth2.Config, tok *oauth2.Token) (oauth2.TokenSource, error) {
	meta := h.rec.byTokenURL(c.Endpoint.TokenURL)
	h.mu.Lock()
	resource := h.resource
	h.mu.Unlock()
	g := &Grant{Server: h.server.Name, Principal: h.principal, Resource: resource,
		ClientID: c.ClientID, ClientSecret: c.ClientSecret, AuthStyle: c.Endpoint.AuthStyle,
		AuthURL: c.Endpoint.AuthURL, TokenURL: c.Endpoint.TokenURL, Scopes: c.Scopes, Saved: time.Now().UTC()}
	if meta != nil {
		g.Issuer, g.RevocationURL = meta.Issuer, meta.RevocationEndpoint
	} else {
		g.Issuer = strings.TrimSuffix(c.Endpoint.TokenURL, "/token")
	}
	g.setToken(tok)
	// The login outlives the call that made it.
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	rev, err := h.oc.Tokens.Save(sctx, g, 0)
	if err != nil {
		return nil, fmt.Errorf("server %s: store the login: %w", h.server.Name, err)
	}
	g.remember()
	src := &grantSource{store: h.oc.Tokens, client: h.client, grant: g, rev: rev}
	h.mu.Lock()
	h.src, h.scopes = src, g.Scopes
	h.mu.Unlock()
	return src, nil
}

// remember makes g's tokens the process's known secrets of its grant (in
// place of the tokens it had before a refresh): every redactor removes
// them, so a server that echoes its token puts nothing into a tool result,
// the stores or a log line.
func (g *Grant) remember() {
	secret.RememberAs(GrantKey(g.Server, g.Issuer, g.Principal), g.AccessToken, g.RefreshToken)
}

// setToken copies tok into g; a token without a refresh token keeps the
// one g has (RFC 6749 6: the server may not rotate it).
func (g *Grant) setToken(tok *oauth2.Token) {
	g.AccessToken, g.TokenType, g.Expiry = tok.AccessToken, tok.TokenType, tok.Expiry
	if tok.RefreshToken != "" {
		g.RefreshToken = tok.RefreshToken
	}
	if s, ok := tok.Extra("scope").(string); ok && s != "" {
		g.Scopes = strings.Fields(s)
	}
}

func unionScopes(lists ...[]string) []string {
	var out []string
	for _, l := range lists {
		for _, s := range l {
			if !slices.Contains(out, s) {
				out = append(out, s)
			}
		}
	}
	return out
}

// grantSource is the oauth2.TokenSource of a stored grant: it refreshes the
// access token before it expires, first adopting a newer grant another
// process stored, and stores what it refreshed (compare-and-set, so two
// processes do not both spend a rotating refresh token).
type grantSource struct {
	store  TokenStore
	client *http.Client

	mu       sync.Mutex
	grant    *Grant
	rev      uint64
	tried401 string // the last access token refreshed after a 401
}

// Token implements oauth2.TokenSource.
func (s *grantSource) Token() (*oauth2.Token, error) {
	s.mu.Lock()
	g := s.grant
	s.mu.Unlock()
	if !g.due() || g.RefreshToken == "" {
		return g.Token(), nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.refresh(ctx, false); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.grant.Token(), nil
}

// refreshAfter401 gets another access token after the server refused
// sent: nil at once when the grant already holds another one, else a
// refresh, once per refused token (a server that refuses every token is
// not asked again and again).
func (s *grantSource) refreshAfter401(ctx context.Context, sent string) error {
	s.mu.Lock()
	cur, tried := s.grant.AccessToken, s.tried401
	s.tried401 = sent
	s.mu.Unlock()
	if sent != "" && sent != cur {
		return nil
	}
	if sent == tried {
		return errors.New("the refreshed token was refused too")
	}
	return s.refresh(ctx, true)
}

// refresh gets a new access token: a newer grant in the store when there
// is one (unless force, after a 401 with the current one), else from the
// token endpoint.
func (s *grantSource) refresh(ctx context.Context, force bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	cur := s.grant
	if g, rev, err := s.store.Load(ctx, cur.Server, cur.Principal); err == nil && g.AccessToken != cur.AccessToken && g.Saved.After(cur.Saved) {
		g.remember()
		s.grant, s.rev = g, rev
		if !g.due() {
			return nil
		}
		cur = g
	}
	_ = force
	if cur.RefreshToken == "" {
		return &oauth2.RetrieveError{ErrorCode: "invalid_grant", ErrorDescription: "no refresh token"}
	}
	rctx := context.WithValue(context.WithValue(ctx, oauth2.HTTPClient, s.client), issuerKey{}, cur.Issuer)
	tok, err := cur.oauth2Config().TokenSource(rctx, &oauth2.Token{RefreshToken: cur.RefreshToken}).Token()
	if err != nil {
		return err
	}
	next := *cur
	next.setToken(tok)
	next.Saved = time.Now().UTC()
	rev, err := s.store.Save(ctx, &next, s.rev)
	switch {
	case errors.Is(err, ErrGrantConflict):
		// Another process stored meanwhile; ours is valid too, theirs is
		// adopted at the next refresh.
	case err != nil:
		return fmt.Errorf("store refreshed token of %s: %w", cur.Server, err)
	default:
		s.rev = rev
	}
	next.remember()
	s.grant = &next
	return nil
}

// asRecorder remembers the authorization server metadata documents the
// SDK fetched during a login: the issuer and revocation endpoint of the
// grant, and the PKCE methods.
type asRecorder struct {
	mu    sync.Mutex
	metas []*oauthex.AuthServerMeta
}

func (r *asRecorder) add(m *oauthex.AuthServerMeta) {
	r.mu.Lock()
	r.metas = append(r.metas, m)
	r.mu.Unlock()
}

// issuer is the issuer of the grant ctx refreshes (grantSource), else of
// the recorded authorization server whose token endpoint is tokenURL, else
// "".
func (r *asRecorder) issuer(ctx context.Context, tokenURL string) string {
	if iss, _ := ctx.Value(issuerKey{}).(string); iss != "" {
		return iss
	}
	if m := r.byTokenURL(tokenURL); m != nil {
		return m.Issuer
	}
	return ""
}

func (r *asRecorder) byTokenURL(tokenURL string) *oauthex.AuthServerMeta {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := len(r.metas) - 1; i >= 0; i-- {
		if r.metas[i].TokenEndpoint == tokenURL {
			return r.metas[i]
		}
	}
	return nil
}

// ErrNoS256 refuses an authorization server without PKCE S256.
var ErrNoS256 = errors.New("the authorization server does not support PKCE with S256 (code_challenge_methods_supported); login refused as the MCP spec requires")

// checkS256 refuses an authorization URL whose server's metadata lists
// PKCE methods without S256.
func (r *asRecorder) checkS256(authURL string) error {
	u, err := url.Parse(authURL)
	if err != nil {
		return err
	}
	u.RawQuery = ""
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := len(r.metas) - 1; i >= 0; i-- {
		m := r.metas[i]
		if m.AuthorizationEndpoint == u.String() {
			if !slices.Contains(m.CodeChallengeMethodsSupported, "S256") {
				return fmt.Errorf("%s: %w", m.Issuer, ErrNoS256)
			}
			return nil
		}
	}
	return nil
}

// recordingTransport hands authorization server metadata responses to rec.
type recordingTransport struct {
	base http.RoundTripper
	rec  *asRecorder
}

func (t *recordingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.base.RoundTrip(req)
	if err != nil || resp.StatusCode != http.StatusOK || req.Method != http.MethodGet {
		return resp, err
	}
	p := req.URL.Path
	if !strings.Contains(p, "/.well-known/oauth-authorization-server") && !strings.Contains(p, "/.well-known/openid-configuration") {
		return resp, err
	}
	body, rerr := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	_ = resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(body))
	if rerr != nil {
		return resp, nil
	}
	var m oauthex.AuthServerMeta
	if json.Unmarshal(body, &m) == nil && m.TokenEndpoint != "" {
		t.rec.add(&m)
	}
	return resp, nil
}

// loginError is the *NeedsLoginError of a failed dial: the one the OAuth
// handler returned, else one made from a Bearer challenge the dial met
// (not when this process runs the login flow: its error says more).
func loginError(r *Runner, s mcpconfig.Server, principal string, challenge *challengeSlot, err error) error {
	var lerr *NeedsLoginError
	if !errors.As(err, &lerr) {
		if r.cfg.OAuth != nil && r.cfg.OAuth.Login != nil || s.OAuth != nil && s.OAuth.Grant == mcpconfig.GrantClientCredentials {
			return nil
		}
		if lerr = challenge.err(s.Name, s.OAuth != nil); lerr == nil {
			return nil
		}
	}
	if PerUser(s) {
		lerr.PerUser = true
		if principal != PrincipalTeam {
			lerr.Principal = principal
		}
	}
	return lerr
}

// loginLost returns the server to needs_login after a call met a refused
// refresh or a scope step-up in a running relay: one notice, the session
// closed, checked again at the health interval.
func (c *conn) loginLost(context.Context, error) {
	// The health check runs now: its ping meets the same answer and puts
	// the server in needs_login (afterCheck), closing the session.
	c.signal(c.wake)
}

// offline is the error of a call that finds no session: the server's
// *NeedsLoginError while it is in needs_login (not waited for: only a login
// brings it back), else ErrOffline.
func (c *conn) offline() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.health.needsLogin && c.health.lastErr != "" {
		return &NeedsLoginError{Server: c.cfg.Name, Reason: "not logged in or the login ended", PerUser: PerUser(c.cfg), Principal: c.principal}
	}
	return ErrOffline
}
