package mcpconfig

import "slices"

// OAuth is an entry's "oauth" object: how the relay authorizes to a remote
// server that requires OAuth (see docs/oauth.md). An entry with one needs a
// login (or, with Grant client_credentials, gets its tokens itself).
type OAuth struct {
	// ClientID and ClientSecret name a pre-registered client; ClientSecret
	// may be ${env:NAME} and is kept out of logs. Without ClientID the
	// relay uses its client metadata document, else dynamic registration.
	ClientID     string
	ClientSecret string
	// Scopes asked for, in addition to those the server's challenge names.
	Scopes []string
	// Grant is authorization_code (default) or client_credentials.
	Grant string
	// Per is "team" (default, one connection) or "user" (one per person).
	Per string
	// PrivateKeyFile is the PEM key for private_key_jwt.
	PrivateKeyFile string
	// Issuer pins the authorization server of a pre-registered client.
	Issuer string
	// TokenEndpointAuth is client_secret_basic, client_secret_post, none
	// or private_key_jwt; empty lets the relay choose from the metadata.
	TokenEndpointAuth string
}

// OAuth grants and token endpoint auth methods.
const (
	GrantAuthorizationCode = "authorization_code"
	GrantClientCredentials = "client_credentials"
)

type rawOAuth struct {
	ClientID          string   `json:"clientId"`
	ClientSecret      string   `json:"clientSecret"`
	Scopes            []string `json:"scopes"`
	Grant             string   `json:"grant"`
	Per               string   `json:"per"`
	PrivateKeyFile    string   `json:"privateKeyFile"`
	Issuer            string   `json:"issuer"`
	TokenEndpointAuth string   `json:"tokenEndpointAuth"`
}

var tokenEndpointAuths = []string{"", "client_secret_basic", "client_secret_post", "none", "private_key_jwt"}

// oauth reads the entry's "oauth" object into s.OAuth.
func (e *entry) oauth(r rawServer, s *Server) {
	if r.OAuth == nil {
		return
	}
	if s.Type == Stdio {
		e.fail("oauth", "only for an http or sse server")
		return
	}
	o := &OAuth{
		ClientID:          e.sub("oauth.clientId", r.OAuth.ClientID, false),
		Scopes:            r.OAuth.Scopes,
		Grant:             r.OAuth.Grant,
		Per:               r.OAuth.Per,
		PrivateKeyFile:    e.sub("oauth.privateKeyFile", r.OAuth.PrivateKeyFile, false),
		Issuer:            r.OAuth.Issuer,
		TokenEndpointAuth: r.OAuth.TokenEndpointAuth,
	}
	if r.OAuth.ClientSecret != "" {
		o.ClientSecret = e.sub("oauth.clientSecret", r.OAuth.ClientSecret, false)
		e.secret(o.ClientSecret)
	}
	switch o.Grant {
	case "":
		o.Grant = GrantAuthorizationCode
	case GrantAuthorizationCode, GrantClientCredentials:
	default:
		e.fail("oauth.grant", "%q is not authorization_code or client_credentials", o.Grant)
	}
	switch o.Per {
	case "":
		o.Per = "team"
	case "team", "user":
	default:
		e.fail("oauth.per", "%q is not team or user", o.Per)
	}
	if !slices.Contains(tokenEndpointAuths, o.TokenEndpointAuth) {
		e.fail("oauth.tokenEndpointAuth", "%q is not client_secret_basic, client_secret_post, none or private_key_jwt", o.TokenEndpointAuth)
	}
	if o.Grant == GrantClientCredentials {
		if o.ClientID == "" {
			e.fail("oauth.clientId", "required for the client_credentials grant")
		}
		if o.ClientSecret == "" && o.PrivateKeyFile == "" {
			e.fail("oauth", "the client_credentials grant needs clientSecret or privateKeyFile")
		}
		if o.Per == "user" {
			e.fail("oauth.per", "the client_credentials grant has no per-user connections")
		}
	}
	if o.TokenEndpointAuth == "private_key_jwt" && o.PrivateKeyFile == "" {
		e.fail("oauth.privateKeyFile", "required for private_key_jwt")
	}
	if o.PrivateKeyFile != "" && o.ClientID == "" && o.Grant != GrantClientCredentials {
		e.fail("oauth.clientId", "required with privateKeyFile (the key authenticates a registered client)")
	}
	s.OAuth = o
}
