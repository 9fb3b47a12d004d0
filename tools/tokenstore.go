package tools

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/oauth2"

	"github.com/relaystation/relay/secret"
)

// PrincipalTeam is the principal of a team-wide connection (an entry
// without "per": "user").
const PrincipalTeam = "team"

// Grant is what a login leaves behind for one server, issuer and principal:
// the tokens, the client the authorization server knows, and its endpoints,
// enough to refresh and to revoke without discovering again. It prints and
// logs without its secrets.
type Grant struct {
	Server    string `json:"server"`
	Issuer    string `json:"issuer"`
	Principal string `json:"principal"`
	// Resource is the RFC 8707 resource the tokens are for.
	Resource string `json:"resource,omitempty"`

	ClientID      string           `json:"client_id"`
	ClientSecret  string           `json:"client_secret,omitempty"`
	AuthStyle     oauth2.AuthStyle `json:"auth_style,omitempty"`
	AuthURL       string           `json:"auth_url,omitempty"`
	TokenURL      string           `json:"token_url"`
	RevocationURL string           `json:"revocation_url,omitempty"`

	// Scopes are the scopes granted (asked again with new ones on a step-up).
	Scopes       []string  `json:"scopes,omitempty"`
	AccessToken  string    `json:"access_token"`
	RefreshToken string    `json:"refresh_token,omitempty"`
	TokenType    string    `json:"token_type,omitempty"`
	Expiry       time.Time `json:"expiry,omitzero"`
	// Saved is when the tokens were stored (by a login or a refresh).
	Saved time.Time `json:"saved"`
}

// String names the grant without its secrets.
func (g *Grant) String() string {
	return fmt.Sprintf("grant{server=%s issuer=%s principal=%s}", g.Server, g.Issuer, g.Principal)
}

// GoString keeps %#v from printing the tokens.
func (g *Grant) GoString() string { return g.String() }

// LogValue keeps slog from printing the tokens.
func (g *Grant) LogValue() slog.Value {
	return slog.GroupValue(slog.String("server", g.Server), slog.String("issuer", g.Issuer), slog.String("principal", g.Principal))
}

// Token is the grant's tokens as an oauth2.Token.
func (g *Grant) Token() *oauth2.Token {
	return &oauth2.Token{AccessToken: g.AccessToken, RefreshToken: g.RefreshToken, TokenType: g.TokenType, Expiry: g.Expiry}
}

// oauth2Config is the client of the grant, for refreshing.
func (g *Grant) oauth2Config() *oauth2.Config {
	return &oauth2.Config{ClientID: g.ClientID, ClientSecret: g.ClientSecret,
		Endpoint: oauth2.Endpoint{AuthURL: g.AuthURL, TokenURL: g.TokenURL, AuthStyle: g.AuthStyle}, Scopes: g.Scopes}
}

// TokenStore keeps Grants, keyed by server, issuer and principal. Every
// implementation encrypts them at rest. Implementations are safe for
// concurrent use.
type TokenStore interface {
	// Load returns the newest grant of server and principal (of any issuer)
	// and its revision, or ErrNoGrant.
	Load(ctx context.Context, server, principal string) (*Grant, uint64, error)
	// Save stores g. With rev 0 it overwrites; otherwise it stores only if
	// the stored revision is still rev, else ErrGrantConflict.
	Save(ctx context.Context, g *Grant, rev uint64) (uint64, error)
	// Delete removes every grant of server and principal.
	Delete(ctx context.Context, server, principal string) error
}

var (
	// ErrNoGrant: no login is stored for the server and principal.
	ErrNoGrant = errors.New("no OAuth login stored")
	// ErrGrantConflict: another process stored the grant meanwhile.
	ErrGrantConflict = errors.New("OAuth grant changed meanwhile")
	// ErrNoSecretKey: OAuth tokens need RELAY_SECRET_KEY or RELAY_SECRET_KEY_FILE.
	ErrNoSecretKey = errors.New("OAuth tokens are stored encrypted: set RELAY_SECRET_KEY or RELAY_SECRET_KEY_FILE (at least 32 characters, e.g. `openssl rand -base64 32`)")
)

// GrantKey is the storage key of server, issuer and principal: three
// base64url parts joined by dots (a valid JetStream KV key and file name).
func GrantKey(server, issuer, principal string) string {
	return "t." + keyPart(server) + "." + keyPart(issuer) + "." + keyPart(principal)
}

// grantPattern is the key filter matching every issuer ("*" in KV).
func grantPattern(server, principal, any string) string {
	return "t." + keyPart(server) + "." + any + "." + keyPart(principal)
}

func keyPart(s string) string {
	if s == "" {
		return "_"
	}
	return base64.RawURLEncoding.EncodeToString([]byte(s))
}

// MinSecretKeyLen is the shortest RELAY_SECRET_KEY accepted.
const MinSecretKeyLen = 32

// Sealer encrypts grants with AES-256-GCM under a key derived (HKDF-SHA256)
// from RELAY_SECRET_KEY. Each value is bound to its storage key (the AAD),
// so a value copied to another key does not open.
type Sealer struct{ aead cipher.AEAD }

// NewSealer derives the sealing key from key; ErrNoSecretKey when key is
// unset, an error when it is shorter than MinSecretKeyLen.
func NewSealer(key secret.Value) (*Sealer, error) {
	k, err := deriveKey(key, "relay oauth token store v1")
	if err != nil {
		return nil, err
	}
	block, err := aes.NewCipher(k)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	return &Sealer{aead: aead}, nil
}

const sealVersion = 1

// deriveKey derives a 32-byte key for purpose info from RELAY_SECRET_KEY:
// ErrNoSecretKey when key is unset, an error when it is shorter than
// MinSecretKeyLen.
func deriveKey(key secret.Value, info string) ([]byte, error) {
	if !key.IsSet() {
		return nil, ErrNoSecretKey
	}
	if len(key.Reveal()) < MinSecretKeyLen {
		return nil, fmt.Errorf("RELAY_SECRET_KEY: shorter than %d characters", MinSecretKeyLen)
	}
	return hkdf.Key(sha256.New, []byte(key.Reveal()), nil, info, 32)
}

// Seal encrypts g for the storage key name.
func (s *Sealer) Seal(name string, g *Grant) ([]byte, error) {
	plain, err := json.Marshal(g)
	if err != nil {
		return nil, err
	}
	out := make([]byte, 1+s.aead.NonceSize(), 1+s.aead.NonceSize()+len(plain)+s.aead.Overhead())
	out[0] = sealVersion
	if _, err := rand.Read(out[1:]); err != nil {
		return nil, err
	}
	return s.aead.Seal(out, out[1:], plain, []byte(name)), nil
}

// ErrSealed: a stored grant does not open (another RELAY_SECRET_KEY, or
// changed).
var ErrSealed = errors.New("stored OAuth grant does not decrypt with this RELAY_SECRET_KEY")

// Open decrypts what Seal wrote for name.
func (s *Sealer) Open(name string, sealed []byte) (*Grant, error) {
	n := s.aead.NonceSize()
	if len(sealed) < 1+n || sealed[0] != sealVersion {
		return nil, ErrSealed
	}
	plain, err := s.aead.Open(nil, sealed[1:1+n], sealed[1+n:], []byte(name))
	if err != nil {
		return nil, ErrSealed
	}
	var g Grant
	if err := json.Unmarshal(plain, &g); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrSealed, err)
	}
	return &g, nil
}

// FileTokenStore keeps grants in a directory (the standalone CLI's, under
// RELAY_DATA_DIR/oauth), one file per key, mode 0600, written by rename so a
// process killed mid-write leaves the previous file or none.
type FileTokenStore struct {
	dir    string
	sealer *Sealer
}

// NewFileTokenStore stores under dir (made 0700 on first save).
func NewFileTokenStore(dir string, sealer *Sealer) *FileTokenStore {
	return &FileTokenStore{dir: dir, sealer: sealer}
}

// Load implements TokenStore. The revision is the file's modification
// time in nanoseconds.
func (f *FileTokenStore) Load(_ context.Context, server, principal string) (*Grant, uint64, error) {
	matches, err := filepath.Glob(filepath.Join(f.dir, grantPattern(server, principal, "*")))
	if err != nil {
		return nil, 0, err
	}
	var best *Grant
	var rev uint64
	for _, m := range matches {
		b, err := os.ReadFile(m)
		if err != nil {
			continue
		}
		g, err := f.sealer.Open(filepath.Base(m), b)
		if err != nil {
			return nil, 0, fmt.Errorf("%s: %w", m, err)
		}
		if best == nil || g.Saved.After(best.Saved) {
			best = g
			if st, err := os.Stat(m); err == nil {
				rev = uint64(st.ModTime().UnixNano())
			}
		}
	}
	if best == nil {
		return nil, 0, ErrNoGrant
	}
	return best, rev, nil
}

// Save implements TokenStore (rev is checked against the file's time).
func (f *FileTokenStore) Save(_ context.Context, g *Grant, rev uint64) (uint64, error) {
	name := GrantKey(g.Server, g.Issuer, g.Principal)
	path := filepath.Join(f.dir, name)
	if rev != 0 {
		if st, err := os.Stat(path); err == nil && uint64(st.ModTime().UnixNano()) != rev {
			return 0, ErrGrantConflict
		}
	}
	sealed, err := f.sealer.Seal(name, g)
	if err != nil {
		return 0, err
	}
	if err := os.MkdirAll(f.dir, 0o700); err != nil {
		return 0, err
	}
	f.sweep()
	tmp, err := os.CreateTemp(f.dir, ".tmp-*")
	if err != nil {
		return 0, err
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return 0, err
	}
	if _, err := tmp.Write(sealed); err != nil {
		tmp.Close()
		return 0, err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return 0, err
	}
	if err := tmp.Close(); err != nil {
		return 0, err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return 0, err
	}
	st, err := os.Stat(path)
	if err != nil {
		return 0, err
	}
	return uint64(st.ModTime().UnixNano()), nil
}

// staleTemp is the age past which a temporary file of Save is a killed
// process's: a Save takes milliseconds.
const staleTemp = time.Minute

// sweep removes the temporary files a process killed inside Save left
// (sealed, but half a write is nothing to keep).
func (f *FileTokenStore) sweep() {
	tmps, _ := filepath.Glob(filepath.Join(f.dir, ".tmp-*"))
	for _, p := range tmps {
		if st, err := os.Stat(p); err == nil && time.Since(st.ModTime()) > staleTemp {
			_ = os.Remove(p)
		}
	}
}

// Delete implements TokenStore.
func (f *FileTokenStore) Delete(_ context.Context, server, principal string) error {
	matches, err := filepath.Glob(filepath.Join(f.dir, grantPattern(server, principal, "*")))
	if err != nil {
		return err
	}
	for _, m := range matches {
		if err := os.Remove(m); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	return nil
}

// GrantKeyFilter is the JetStream KV filter of every issuer's grant of
// server and principal.
func GrantKeyFilter(server, principal string) string { return grantPattern(server, principal, "*") }

// GrantServerFilter is the JetStream KV filter of every grant of server
// (any issuer, any principal).
func GrantServerFilter(server string) string { return "t." + keyPart(server) + ".*.*" }
