package tools

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/oauthex"
	"golang.org/x/oauth2"

	"github.com/relaystation/relay/tools/mcpconfig"
)

// ClientAssertionType is RFC 7523's client_assertion_type.
const ClientAssertionType = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"

// jwtKey is a private_key_jwt signing key: EC P-256 (ES256) or RSA (RS256).
// It never prints its key material.
type jwtKey struct {
	alg  string
	file string
	ec   *ecdsa.PrivateKey
	rsa  *rsa.PrivateKey
}

func (k *jwtKey) String() string { return "jwtKey(" + k.alg + ", " + k.file + ")" }

// loadJWTKey reads the PEM private key of file (PKCS#8, SEC 1 or PKCS#1).
// Errors name the file, never its content.
func loadJWTKey(file string) (*jwtKey, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("oauth.privateKeyFile: %w", err)
	}
	blk, _ := pem.Decode(b)
	if blk == nil {
		return nil, fmt.Errorf("oauth.privateKeyFile %s: no PEM block (want a PEM private key, EC P-256 or RSA)", file)
	}
	var key any
	switch blk.Type {
	case "EC PRIVATE KEY":
		key, err = x509.ParseECPrivateKey(blk.Bytes)
	case "RSA PRIVATE KEY":
		key, err = x509.ParsePKCS1PrivateKey(blk.Bytes)
	default:
		key, err = x509.ParsePKCS8PrivateKey(blk.Bytes)
	}
	if err != nil {
		return nil, fmt.Errorf("oauth.privateKeyFile %s: not a readable %s (want EC P-256 or RSA)", file, blk.Type)
	}
	switch k := key.(type) {
	case *ecdsa.PrivateKey:
		if k.Curve != elliptic.P256() {
			return nil, fmt.Errorf("oauth.privateKeyFile %s: EC curve %s is not supported (want P-256 for ES256)", file, k.Curve.Params().Name)
		}
		return &jwtKey{alg: "ES256", file: file, ec: k}, nil
	case *rsa.PrivateKey:
		return &jwtKey{alg: "RS256", file: file, rsa: k}, nil
	}
	return nil, fmt.Errorf("oauth.privateKeyFile %s: a %T key is not supported (want EC P-256 or RSA)", file, key)
}

// assertion signs the RFC 7523 client assertion of clientID for audience.
func (k *jwtKey) assertion(clientID, audience string, now time.Time) (string, error) {
	hdr, _ := json.Marshal(map[string]string{"alg": k.alg, "typ": "JWT"})
	claims, _ := json.Marshal(map[string]any{"iss": clientID, "sub": clientID, "aud": audience,
		"jti": rand.Text(), "iat": now.Unix(), "exp": now.Add(5 * time.Minute).Unix()})
	enc := base64.RawURLEncoding
	input := enc.EncodeToString(hdr) + "." + enc.EncodeToString(claims)
	sum := sha256.Sum256([]byte(input))
	var sig []byte
	switch {
	case k.ec != nil:
		r, s, err := ecdsa.Sign(rand.Reader, k.ec, sum[:])
		if err != nil {
			return "", fmt.Errorf("signing the client assertion: %w", err)
		}
		sig = make([]byte, 64) // JWS: fixed-width R || S
		r.FillBytes(sig[:32])
		s.FillBytes(sig[32:])
	default:
		var err error
		if sig, err = rsa.SignPKCS1v15(rand.Reader, k.rsa, crypto.SHA256, sum[:]); err != nil {
			return "", fmt.Errorf("signing the client assertion: %w", err)
		}
	}
	return input + "." + enc.EncodeToString(sig), nil
}

// jwtClientCredentials is the relay's auth.OAuthHandler for the client
// credentials grant with private_key_jwt (go-sdk's extauth handler only
// knows client secrets): discovery by RFC 9728 and RFC 8414, then a token
// request authenticated by a fresh signed assertion each time.
type jwtClientCredentials struct {
	server mcpconfig.Server
	key    *jwtKey
	client *http.Client

	mu  sync.Mutex
	src oauth2.TokenSource
}

var _ auth.OAuthHandler = (*jwtClientCredentials)(nil)

func newJWTClientCredentials(s mcpconfig.Server, client *http.Client) (*jwtClientCredentials, error) {
	key, err := loadJWTKey(s.OAuth.PrivateKeyFile)
	if err != nil {
		return nil, fmt.Errorf("server %s: %w", s.Name, err)
	}
	return &jwtClientCredentials{server: s, key: key, client: client}, nil
}

// TokenSource implements auth.OAuthHandler.
func (h *jwtClientCredentials) TokenSource(context.Context) (oauth2.TokenSource, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.src, nil
}

// Authorize implements auth.OAuthHandler.
func (h *jwtClientCredentials) Authorize(ctx context.Context, req *http.Request, resp *http.Response) error {
	closeBody(resp)
	challenges, _ := oauthex.ParseWWWAuthenticate(resp.Header.Values("WWW-Authenticate"))
	prm := h.resourceMetadata(ctx, challenges, req.URL.String())
	if len(prm.AuthorizationServers) == 0 {
		return fmt.Errorf("server %s: oauth: its protected resource metadata names no authorization server", h.server.Name)
	}
	asm, err := auth.GetAuthServerMetadata(ctx, prm.AuthorizationServers[0], h.client)
	if err != nil {
		return fmt.Errorf("server %s: oauth: authorization server metadata: %w", h.server.Name, err)
	}
	if asm == nil {
		asm = &oauthex.AuthServerMeta{Issuer: prm.AuthorizationServers[0], TokenEndpoint: strings.TrimSuffix(prm.AuthorizationServers[0], "/") + "/token"}
	}
	if h.server.OAuth.Issuer != "" && h.server.OAuth.Issuer != asm.Issuer {
		return fmt.Errorf("server %s: oauth: authorization server %q is not the entry's issuer %q", h.server.Name, asm.Issuer, h.server.OAuth.Issuer)
	}
	if algs := asm.TokenEndpointAuthSigningAlgValuesSupported; len(algs) > 0 && !slices.Contains(algs, h.key.alg) {
		return fmt.Errorf("server %s: oauth: the authorization server accepts client assertions signed with %v, the key %s signs %s: use a key of one of those algorithms",
			h.server.Name, algs, h.key.file, h.key.alg)
	}
	var scopes []string
	for _, c := range challenges {
		if c.Scheme == "bearer" && c.Params["scope"] != "" {
			scopes = strings.Fields(c.Params["scope"])
		}
	}
	if len(scopes) == 0 {
		scopes = prm.ScopesSupported
	}
	ts := &assertionTokenSource{h: h, tokenURL: asm.TokenEndpoint, audience: asm.Issuer, scopes: scopes, ctx: ctx}
	tok, err := ts.Token()
	if err != nil {
		return err
	}
	ts.ctx = context.WithoutCancel(ctx)
	h.mu.Lock()
	h.src = oauth2.ReuseTokenSource(tok, ts)
	h.mu.Unlock()
	return nil
}

// resourceMetadata discovers the server's RFC 9728 metadata (the
// challenge's resource_metadata, then the path-based and root well-known
// URLs), else the 2025-03-26 fallback: the server's root is its
// authorization server.
func (h *jwtClientCredentials) resourceMetadata(ctx context.Context, challenges []oauthex.Challenge, resource string) *oauthex.ProtectedResourceMetadata {
	var urls []string
	for _, c := range challenges {
		if u := c.Params["resource_metadata"]; u != "" {
			urls = append(urls, u)
		}
	}
	ru, err := url.Parse(resource)
	if err == nil {
		mu := *ru
		mu.RawQuery = ""
		mu.Path = "/.well-known/oauth-protected-resource/" + strings.TrimLeft(ru.Path, "/")
		urls = append(urls, mu.String())
		mu.Path = "/.well-known/oauth-protected-resource"
		urls = append(urls, mu.String())
	}
	for _, u := range urls {
		if prm, err := oauthex.GetProtectedResourceMetadata(ctx, u, resource, h.client); err == nil && prm != nil {
			return prm
		}
	}
	root := ""
	if ru != nil {
		root = (&url.URL{Scheme: ru.Scheme, Host: ru.Host}).String()
	}
	return &oauthex.ProtectedResourceMetadata{Resource: resource, AuthorizationServers: []string{root}}
}

// assertionTokenSource requests a token with a freshly signed assertion.
type assertionTokenSource struct {
	h                  *jwtClientCredentials
	tokenURL, audience string
	scopes             []string
	ctx                context.Context
}

func (s *assertionTokenSource) Token() (*oauth2.Token, error) {
	name, clientID := s.h.server.Name, s.h.server.OAuth.ClientID
	a, err := s.h.key.assertion(clientID, s.audience, time.Now())
	if err != nil {
		return nil, fmt.Errorf("server %s: oauth: %w", name, err)
	}
	form := url.Values{"grant_type": {"client_credentials"}, "client_id": {clientID},
		"client_assertion_type": {ClientAssertionType}, "client_assertion": {a}}
	if len(s.scopes) > 0 {
		form.Set("scope", strings.Join(s.scopes, " "))
	}
	req, err := http.NewRequestWithContext(s.ctx, http.MethodPost, s.tokenURL, strings.NewReader(form.Encode()))
	if err != nil {
		return nil, fmt.Errorf("server %s: oauth: %w", name, err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Accept", "application/json")
	resp, err := s.h.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("server %s: oauth: token request to %s: %w", name, s.tokenURL, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	var tr struct {
		AccessToken string `json:"access_token"`
		TokenType   string `json:"token_type"`
		ExpiresIn   int64  `json:"expires_in"`
		Error       string `json:"error"`
		Description string `json:"error_description"`
	}
	_ = json.Unmarshal(body, &tr)
	if resp.StatusCode != http.StatusOK || tr.AccessToken == "" {
		return nil, fmt.Errorf("server %s: oauth: the token endpoint %s refused the client assertion of client %q signed with %s (%s): %s %s; check that the authorization server has this key's public key for the client",
			name, s.tokenURL, clientID, s.h.key.file, s.h.key.alg, resp.Status, strings.TrimSpace(tr.Error+" "+tr.Description))
	}
	tok := &oauth2.Token{AccessToken: tr.AccessToken, TokenType: tr.TokenType}
	if tr.ExpiresIn > 0 {
		tok.Expiry = time.Now().Add(time.Duration(tr.ExpiresIn) * time.Second)
	}
	return tok, nil
}

// assertionTransport authenticates the token requests of the authorization
// code grant (the code exchange and every refresh) by private_key_jwt, for
// an entry with "clientId" and "privateKeyFile": the go-sdk's handler and
// golang.org/x/oauth2 send only client secrets. It rewrites a form POST
// whose grant_type is authorization_code or refresh_token: no secret, no
// Basic header, but client_id and a fresh signed client_assertion whose
// audience is the authorization server's issuer (audience), else the token
// endpoint (RFC 7523 3). Every other request (metadata, registration,
// revocation, the MCP server's) passes unchanged.
type assertionTransport struct {
	base     http.RoundTripper
	key      *jwtKey
	clientID string
	// audience is the issuer of the authorization server whose token
	// endpoint is tokenURL, "" when unknown.
	audience func(ctx context.Context, tokenURL string) string
}

// issuerKey carries the issuer of a grant being refreshed (grantSource) to
// the assertion's audience.
type issuerKey struct{}

func (t *assertionTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method != http.MethodPost || req.Body == nil ||
		!strings.HasPrefix(req.Header.Get("Content-Type"), "application/x-www-form-urlencoded") {
		return t.base.RoundTrip(req)
	}
	body, err := io.ReadAll(io.LimitReader(req.Body, 1<<20))
	req.Body.Close()
	if err != nil {
		return nil, err
	}
	form, err := url.ParseQuery(string(body))
	if gt := form.Get("grant_type"); err != nil || gt != "authorization_code" && gt != "refresh_token" {
		out := req.Clone(req.Context())
		out.Body = io.NopCloser(strings.NewReader(string(body)))
		return t.base.RoundTrip(out)
	}
	tokenURL := *req.URL
	tokenURL.RawQuery = ""
	aud := t.audience(req.Context(), tokenURL.String())
	if aud == "" {
		aud = tokenURL.String()
	}
	a, err := t.key.assertion(t.clientID, aud, time.Now())
	if err != nil {
		return nil, err
	}
	form.Del("client_secret")
	form.Set("client_id", t.clientID)
	form.Set("client_assertion_type", ClientAssertionType)
	form.Set("client_assertion", a)
	enc := form.Encode()
	out := req.Clone(req.Context())
	out.Header.Del("Authorization")
	out.Body, out.ContentLength = io.NopCloser(strings.NewReader(enc)), int64(len(enc))
	out.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(strings.NewReader(enc)), nil }
	return t.base.RoundTrip(out)
}
