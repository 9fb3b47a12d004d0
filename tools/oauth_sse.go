package tools

import (
	"errors"
	"io"
	"net/http"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"golang.org/x/oauth2"
)

// withOAuth gives client what the SDK's streamable transport does with an
// OAuthHandler, for a transport that has no such field (the SDK's SSE
// client, 2024-11-05): the grant's access token on every request, and on a
// 401 or 403 the handler's Authorize (a refresh, a login where the process
// can run one, or a *NeedsLoginError) and the request sent once more.
// A nil h returns client unchanged.
func withOAuth(client *http.Client, h auth.OAuthHandler) *http.Client {
	if h == nil {
		return client
	}
	return wrapClient(client, func(rt http.RoundTripper) http.RoundTripper { return &oauthTransport{base: rt, h: h} })
}

type oauthTransport struct {
	base http.RoundTripper
	h    auth.OAuthHandler
}

func (t *oauthTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	sent, err := t.withToken(req, req.Body)
	if err != nil {
		return nil, err
	}
	resp, err := t.base.RoundTrip(sent)
	if err != nil || resp.StatusCode != http.StatusUnauthorized && resp.StatusCode != http.StatusForbidden {
		return resp, err
	}
	if req.Body != nil && req.Body != http.NoBody && req.GetBody == nil {
		return resp, nil // its body is spent: it cannot be sent again
	}
	if err := t.h.Authorize(req.Context(), sent, resp); err != nil {
		return nil, err
	}
	body := req.Body
	if req.GetBody != nil {
		if body, err = req.GetBody(); err != nil {
			return nil, err
		}
	}
	again, err := t.withToken(req, body)
	if err != nil {
		return nil, err
	}
	return t.base.RoundTrip(again)
}

// withToken is a copy of req with body and the grant's access token; none
// when there is no grant, or its refresh token was refused (invalid_grant:
// the server's 401 then leads to Authorize, as in the SDK).
func (t *oauthTransport) withToken(req *http.Request, body io.ReadCloser) (*http.Request, error) {
	out := req.Clone(req.Context())
	out.Body = body
	ts, err := t.h.TokenSource(req.Context())
	if err != nil || ts == nil {
		return out, err
	}
	tok, err := ts.Token()
	var rerr *oauth2.RetrieveError
	switch {
	case errors.As(err, &rerr) && rerr.ErrorCode == "invalid_grant":
	case err != nil:
		return nil, err
	case tok != nil:
		out.Header.Set("Authorization", "Bearer "+tok.AccessToken)
	}
	return out, nil
}
