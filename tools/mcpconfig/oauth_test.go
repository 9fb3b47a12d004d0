package mcpconfig

import (
	"strings"
	"testing"
)

func TestOAuthEntry(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, oauth, wantErr string
		want                 OAuth
	}{
		{"defaults", `{}`, "", OAuth{Grant: GrantAuthorizationCode, Per: "team"}},
		{"pre-registered", `{"clientId": "relay", "clientSecret": "${env:OAUTH_SECRET}", "scopes": ["read"], "issuer": "https://as", "tokenEndpointAuth": "client_secret_post"}`, "",
			OAuth{ClientID: "relay", ClientSecret: "s3cret-value-long", Scopes: []string{"read"}, Issuer: "https://as", TokenEndpointAuth: "client_secret_post", Grant: GrantAuthorizationCode, Per: "team"}},
		{"per user", `{"per": "user"}`, "", OAuth{Grant: GrantAuthorizationCode, Per: "user"}},
		{"bad grant", `{"grant": "password"}`, "oauth.grant", OAuth{}},
		{"bad per", `{"per": "everyone"}`, "oauth.per", OAuth{}},
		{"bad auth", `{"tokenEndpointAuth": "tls"}`, "oauth.tokenEndpointAuth", OAuth{}},
		{"cc without id", `{"grant": "client_credentials", "clientSecret": "x"}`, "oauth.clientId", OAuth{}},
		{"cc without secret", `{"grant": "client_credentials", "clientId": "x"}`, "needs clientSecret or privateKeyFile", OAuth{}},
		{"jwt without key", `{"clientId": "x", "tokenEndpointAuth": "private_key_jwt"}`, "oauth.privateKeyFile", OAuth{}},
		{"key without client", `{"privateKeyFile": "/keys/relay.pem"}`, "oauth.clientId", OAuth{}},
		{"unknown field", `{"clientID": "x"}`, "clientID", OAuth{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			doc := `{"mcpServers": {"hosted": {"url": "https://mcp.example.com/mcp", "oauth": ` + tt.oauth + `}}}`
			servers, err := Parse([]byte(doc), Options{Lookup: func(string) (string, bool) { return "s3cret-value-long", true }})
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("got %v, want an error naming %s", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := servers[0].OAuth
			if got == nil || got.ClientID != tt.want.ClientID || got.ClientSecret != tt.want.ClientSecret || got.Grant != tt.want.Grant ||
				got.Per != tt.want.Per || got.Issuer != tt.want.Issuer || got.TokenEndpointAuth != tt.want.TokenEndpointAuth ||
				strings.Join(got.Scopes, " ") != strings.Join(tt.want.Scopes, " ") {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
			if tt.want.ClientSecret != "" && !strings.Contains(strings.Join(servers[0].Secrets, ","), tt.want.ClientSecret) {
				t.Errorf("the client secret is not among the entry's secrets")
			}
		})
	}
	_, err := Parse([]byte(`{"mcpServers": {"local": {"command": "x", "oauth": {}}}}`), Options{})
	if err == nil || !strings.Contains(err.Error(), "only for an http or sse server") {
		t.Errorf("stdio with oauth: got %v, want a refusal", err)
	}
}
