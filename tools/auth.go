package tools

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
)

// StateNeedsLogin: a remote server asked for an OAuth login (401 with a
// Bearer challenge). It is not a failure: the server is not retried in a
// loop and never auto-disabled; `relay mcp login <server>` connects it.
const StateNeedsLogin = "needs_login"

// NoticeNeedsLogin is the notice sent once per server when it needs a login.
const NoticeNeedsLogin = "server_needs_login"

// ErrNeedsLogin is matched (errors.Is) by a *NeedsLoginError.
var ErrNeedsLogin = errors.New("needs an OAuth login")

// NeedsLoginError says a remote server answered 401 with a Bearer challenge.
type NeedsLoginError struct {
	Server string
	// ResourceMetadata is the RFC 9728 metadata URL of the challenge, if any.
	ResourceMetadata string
	// Scope is the challenge's scope parameter, if any.
	Scope string
	// Reason says why a login made before no longer does (the refresh token
	// was refused, more scopes are asked for); "" for a first login.
	Reason string
	// PerUser: the server connects each person's own account; Principal is
	// the person (a Slack user id) whose connection is missing, "" when the
	// call acts for nobody.
	PerUser   bool
	Principal string
}

func (e *NeedsLoginError) Error() string {
	if e.PerUser {
		why := ""
		if e.Reason != "" {
			why = " (" + e.Reason + ")"
		}
		if e.Principal == "" {
			return fmt.Sprintf("server %s connects each person's own account and this call acts for nobody: the person it runs for (the approver of an agent's tool step) must connect with `%s` in Slack", e.Server, ConnectCommand(e.Server))
		}
		return fmt.Sprintf("server %s connects each person's own account and %s has not connected theirs%s: run `%s` in Slack", e.Server, e.Principal, why, ConnectCommand(e.Server))
	}
	if e.Reason != "" {
		return fmt.Sprintf("server %s needs an OAuth login (%s): run `relay mcp login %s`", e.Server, e.Reason, e.Server)
	}
	return fmt.Sprintf("server %s needs an OAuth login: run `relay mcp login %s`", e.Server, e.Server)
}

// Is makes errors.Is(err, ErrNeedsLogin) true.
func (e *NeedsLoginError) Is(target error) bool { return target == ErrNeedsLogin }

// LoginCommand is what an operator runs to connect server.
func LoginCommand(server string) string { return "relay mcp login " + server }

// challengeSlot records the first Bearer challenge seen on a dial.
type challengeSlot struct {
	mu       sync.Mutex
	seen     bool // a Bearer challenge
	any401   bool // any 401 (enough when the entry has an "oauth" object)
	metadata string
	scope    string
}

type challengeKey struct{}

func withChallengeSlot(ctx context.Context) (context.Context, *challengeSlot) {
	s := &challengeSlot{}
	return context.WithValue(ctx, challengeKey{}, s), s
}

// authProbe notes 401 answers carrying a Bearer challenge in the request
// context's challengeSlot (set by dial); the response is returned as is.
type authProbe struct{ base http.RoundTripper }

func (p *authProbe) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := p.base.RoundTrip(req)
	if err != nil || resp.StatusCode != http.StatusUnauthorized {
		return resp, err
	}
	slot, _ := req.Context().Value(challengeKey{}).(*challengeSlot)
	if slot == nil {
		return resp, err
	}
	slot.mu.Lock()
	slot.any401 = true
	slot.mu.Unlock()
	for _, h := range resp.Header.Values("WWW-Authenticate") {
		params, ok := bearerChallenge(h)
		if !ok {
			continue
		}
		slot.mu.Lock()
		if !slot.seen {
			slot.seen, slot.metadata, slot.scope = true, params["resource_metadata"], params["scope"]
		}
		slot.mu.Unlock()
		break
	}
	return resp, err
}

// err is a *NeedsLoginError when the dial met a Bearer challenge, or any
// 401 when oauth (the entry declares OAuth) is set; nil otherwise.
func (s *challengeSlot) err(server string, oauth bool) *NeedsLoginError {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.seen && !(oauth && s.any401) {
		return nil
	}
	return &NeedsLoginError{Server: server, ResourceMetadata: s.metadata, Scope: s.scope}
}

// withAuthProbe wraps c's transport with an authProbe.
func withAuthProbe(c *http.Client) *http.Client {
	return wrapClient(c, func(rt http.RoundTripper) http.RoundTripper { return &authProbe{base: rt} })
}

// wrapClient is a copy of c (nil: http.DefaultClient) whose transport is
// wrap of c's (nil: http.DefaultTransport); c is unchanged.
func wrapClient(c *http.Client, wrap func(http.RoundTripper) http.RoundTripper) *http.Client {
	if c == nil {
		c = http.DefaultClient
	}
	out := *c
	rt := out.Transport
	if rt == nil {
		rt = http.DefaultTransport
	}
	out.Transport = wrap(rt)
	return &out
}

// bearerChallenge parses a WWW-Authenticate value whose scheme is Bearer
// into its auth-params (quoted or token values), ok false otherwise.
func bearerChallenge(h string) (map[string]string, bool) {
	h = strings.TrimSpace(h)
	scheme, rest, _ := strings.Cut(h, " ")
	if !strings.EqualFold(scheme, "Bearer") {
		return nil, false
	}
	params := map[string]string{}
	for rest = strings.TrimSpace(rest); rest != ""; rest = strings.TrimLeft(strings.TrimSpace(rest), ",") {
		rest = strings.TrimSpace(rest)
		k, v, ok := strings.Cut(rest, "=")
		if !ok {
			break
		}
		k = strings.ToLower(strings.TrimSpace(k))
		v = strings.TrimLeft(v, " ")
		if strings.HasPrefix(v, `"`) {
			var b strings.Builder
			i := 1
			for ; i < len(v) && v[i] != '"'; i++ {
				if v[i] == '\\' && i+1 < len(v) {
					i++
				}
				b.WriteByte(v[i])
			}
			params[k] = b.String()
			rest = v[min(i+1, len(v)):]
		} else {
			end := strings.IndexByte(v, ',')
			if end < 0 {
				end = len(v)
			}
			params[k] = strings.TrimSpace(v[:end])
			rest = v[end:]
		}
	}
	return params, true
}
