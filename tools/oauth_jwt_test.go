package tools

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/relaystation/relay/internal/testenv"
	"github.com/relaystation/relay/tools/mcpconfig"
	"github.com/relaystation/relay/tools/oauthtest"
)

// writeKey writes key as a PKCS#8 PEM file and returns its path and PEM.
func writeKey(t *testing.T, key crypto.Signer) (string, []byte) {
	t.Helper()
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	p := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
	f := filepath.Join(t.TempDir(), "key.pem")
	if err := os.WriteFile(f, p, 0o600); err != nil {
		t.Fatal(err)
	}
	return f, p
}

func jwtServer(t *testing.T, file string, url string) mcpconfig.Server {
	return mcpconfig.Server{Name: "hosted", Type: mcpconfig.HTTP, URL: url,
		OAuth: &mcpconfig.OAuth{Grant: mcpconfig.GrantClientCredentials, ClientID: "relay-bot", PrivateKeyFile: file, TokenEndpointAuth: "private_key_jwt"}}
}

// TestClientCredentialsJWT: the client credentials grant authenticated by
// private_key_jwt (ES256 and RS256) against a token endpoint that verifies
// the assertion with the client's public key; the call carries the
// client's identity.
func TestClientCredentialsJWT(t *testing.T) {
	t.Parallel()
	ec, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	rk, _ := rsa.GenerateKey(rand.Reader, 2048)
	for _, tc := range []struct {
		name string
		key  crypto.Signer
		algs []string
	}{{"ES256", ec, []string{"ES256"}}, {"RS256", rk, []string{"RS256", "ES256"}}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := oauthtest.Start(t, oauthtest.Options{ClientID: "relay-bot", ClientKey: tc.key.Public(), SigningAlgs: tc.algs})
			file, _ := writeKey(t, tc.key)
			r := startUnready(t, fastConfig(t, jwtServer(t, file, srv.MCP)))
			testenv.WaitFor(t, 20*time.Second, "ready", func() bool { return r.Servers()[0].State == StateReady })
			if res := whoami(t, r); res.Err != nil || !strings.Contains(fmt.Sprint(res.Content), "user:client:relay-bot") {
				t.Fatalf("got %v %v, want the client's identity", res.Content, res.Err)
			}
			if n := srv.AssertionsRefused.Load(); n != 0 {
				t.Errorf("%d assertions refused", n)
			}
		})
	}
}

// TestClientCredentialsJWTWrongKey: an assertion signed with a key the
// authorization server does not know is refused with an error naming the
// key file and what to check, and never the key itself.
func TestClientCredentialsJWTWrongKey(t *testing.T) {
	t.Parallel()
	registered, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	wrong, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	srv := oauthtest.Start(t, oauthtest.Options{ClientID: "relay-bot", ClientKey: registered.Public(), SigningAlgs: []string{"ES256"}})
	file, pemBytes := writeKey(t, wrong)
	h, err := newJWTClientCredentials(jwtServer(t, file, srv.MCP), http.DefaultClient)
	if err == nil {
		err = authorizeOnce(t, h, srv.MCP)
	}
	if err == nil {
		t.Fatal("a wrong key was accepted")
	}
	msg := err.Error()
	for _, want := range []string{"refused the client assertion", file, "ES256", "invalid_client"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q does not name %q", msg, want)
		}
	}
	body := string(bytes.TrimSpace(pemBytes))
	body = strings.Split(body, "\n")[1]
	if strings.Contains(msg, body) || strings.Contains(fmt.Sprintf("%v %+v", h.key, h), body) {
		t.Error("the private key appears in the error or the handler's printout")
	}
	if srv.AssertionsRefused.Load() == 0 {
		t.Error("the server refused no assertion")
	}
}

// TestClientCredentialsJWTAlgMismatch: a key whose algorithm the server
// does not accept is refused before any token request, naming both.
func TestClientCredentialsJWTAlgMismatch(t *testing.T) {
	t.Parallel()
	ec, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	srv := oauthtest.Start(t, oauthtest.Options{ClientID: "relay-bot", ClientKey: ec.Public(), SigningAlgs: []string{"RS256"}})
	file, _ := writeKey(t, ec)
	h, err := newJWTClientCredentials(jwtServer(t, file, srv.MCP), http.DefaultClient)
	if err != nil {
		t.Fatal(err)
	}
	err = authorizeOnce(t, h, srv.MCP)
	if err == nil || !strings.Contains(err.Error(), "[RS256]") || !strings.Contains(err.Error(), "ES256") {
		t.Fatalf("got %v, want an algorithm mismatch naming RS256 and ES256", err)
	}
	if srv.AssertionsRefused.Load() != 0 {
		t.Error("a token request was sent")
	}
}

func TestLoadJWTKeyErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.pem")
	os.WriteFile(bad, []byte("not a key"), 0o600)
	p384, _ := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	f384, _ := writeKey(t, p384)
	for file, want := range map[string]string{bad: "no PEM block", f384: "P-384", filepath.Join(dir, "none.pem"): "no such file"} {
		if _, err := loadJWTKey(file); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: got %v, want %q", file, err, want)
		}
	}
}

// authorizeOnce meets the server's 401 without a token and runs h's
// Authorize on it, as the SDK's transport does.
func authorizeOnce(t *testing.T, h *jwtClientCredentials, url string) error {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, url, strings.NewReader(`{}`))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("got %s, want 401", resp.Status)
	}
	return h.Authorize(t.Context(), req, resp)
}

// TestAuthCodePrivateKeyJWT: a pre-registered client with "privateKeyFile"
// logs in with the authorization code grant and refreshes, each token
// request authenticated by a fresh signed assertion (the authorization
// server refuses the client without one), also in a runner that did not do
// the login.
func TestAuthCodePrivateKeyJWT(t *testing.T) {
	t.Parallel()
	ec, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	srv := oauthtest.Start(t, oauthtest.Options{ClientID: "relay-app", ClientKey: ec.Public(), SigningAlgs: []string{"ES256"}, User: "alice"})
	file, _ := writeKey(t, ec)
	s := mcpconfig.Server{Name: "hosted", Type: mcpconfig.HTTP, URL: srv.MCP, ProtocolVersion: mcpconfig.DefaultProtocolVersion,
		OAuth: &mcpconfig.OAuth{ClientID: "relay-app", PrivateKeyFile: file, Per: "team"}}
	store := NewFileTokenStore(filepath.Join(t.TempDir(), "oauth"), testSealer(t))
	if err := login(t, store, s, nil); err != nil {
		t.Fatalf("login: %v", err)
	}
	cfg := fastConfig(t, s)
	cfg.OAuth = &OAuthConfig{Tokens: store}
	r := startUnready(t, cfg)
	testenv.WaitFor(t, 20*time.Second, "ready", func() bool { return r.Servers()[0].State == StateReady })
	srv.ExpireAccess()
	if res := whoami(t, r); res.Err != nil || !strings.Contains(fmt.Sprint(res.Content), "user:alice") {
		t.Fatalf("got %v %v, want user:alice after a refresh", res.Content, res.Err)
	}
	if srv.Logins.Load() != 1 || srv.Refreshes.Load() == 0 || srv.AssertionsRefused.Load() != 0 {
		t.Errorf("got %d logins, %d refreshes, %d assertions refused; want 1, at least 1, 0",
			srv.Logins.Load(), srv.Refreshes.Load(), srv.AssertionsRefused.Load())
	}
}
