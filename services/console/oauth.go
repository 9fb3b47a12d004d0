package console

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/relaystation/relay/tools"
	"github.com/relaystation/relay/tools/mcpconfig"
)

// Connector runs the OAuth authorization code flow of remote MCP servers
// for the console (tools.Connector): an operator's Connect on the tools
// page for a team-wide server, and a person's signed `/relay connect` link
// for a per-user one. The redirect comes back to /oauth/callback.
type Connector interface {
	// Redeem checks a signed connection link and uses it up.
	Redeem(ctx context.Context, token string) (*tools.ConnectLink, error)
	// Start returns the authorization URL of principal's flow for server.
	Start(ctx context.Context, redirectURL, server, principal string) (string, error)
	// Finish takes the redirect and waits for the grant to be stored.
	Finish(ctx context.Context, q url.Values) (server, principal string, err error)
	// Disconnect revokes and deletes principal's grant.
	Disconnect(ctx context.Context, server, principal string) (revoked bool, err error)
	// Connected reports whether principal has a grant for server.
	Connected(ctx context.Context, server, principal string) bool
	// People are the Slack users connected to per-user server.
	People(ctx context.Context, server string) []string
	// Server is the mcp.json entry of name.
	Server(name string) (mcpconfig.Server, bool)
}

// CallbackPath is the console's OAuth redirect path.
const CallbackPath = "/oauth/callback"

// oauthRoutes: /oauth/connect (a signed link, no sign-in) and
// /oauth/callback (the authorization server's redirect, matched by its
// state) are the console's only paths without an operator session; each
// serves one flow once. /oauth/start and /oauth/disconnect are an
// operator's, with the session's CSRF token.
func (s *Service) oauthRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /oauth/connect", s.connectLink)
	mux.HandleFunc("GET "+CallbackPath, s.oauthCallback)
	mux.HandleFunc("POST /oauth/start", s.guard(s.oauthStart))
	mux.HandleFunc("POST /oauth/disconnect", s.guard(s.act(s.oauthDisconnect)))
}

// redirectURL is the console's /oauth/callback: under PublicURL when set
// (RELAY_CONSOLE_URL), else on the Host the browser used.
func (s *Service) redirectURL(r *http.Request) string {
	if s.cfg.PublicURL != "" {
		return strings.TrimSuffix(s.cfg.PublicURL, "/") + CallbackPath
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return scheme + "://" + r.Host + CallbackPath
}

// oauthPage answers a browser of the tokenless OAuth paths with a short
// page (no navigation: the person may not be an operator).
func (s *Service) oauthPage(w http.ResponseWriter, status int, title, msg string) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_ = s.tmpl.ExecuteTemplate(w, "oauth", map[string]any{"Title": title, "Message": msg})
}

// flowContext bounds a request of a flow (it outlives a browser that
// leaves); ok is false, and the browser told so, on a console that
// connects nothing.
func (s *Service) flowContext(w http.ResponseWriter, r *http.Request) (ctx context.Context, cancel context.CancelFunc, ok bool) {
	if s.cfg.Connect == nil {
		s.oauthPage(w, http.StatusNotFound, "Not available", "This console does not connect MCP servers (RELAY_SECRET_KEY or mcp.json is not available to it).")
		return nil, nil, false
	}
	ctx, cancel = context.WithTimeout(context.WithoutCancel(r.Context()), 2*time.Minute)
	return ctx, cancel, true
}

// connectLink opens a person's signed, single-use link: it starts their
// flow and sends the browser to the authorization server.
func (s *Service) connectLink(w http.ResponseWriter, r *http.Request) {
	ctx, cancel, ok := s.flowContext(w, r)
	if !ok {
		return
	}
	defer cancel()
	link, err := s.cfg.Connect.Redeem(ctx, r.URL.Query().Get("t"))
	if err != nil {
		status := http.StatusForbidden
		if errors.Is(err, tools.ErrLinkExpired) || errors.Is(err, tools.ErrLinkUsed) {
			status = http.StatusGone
		}
		s.log.Warn("console: connection link refused", "remote", r.RemoteAddr, "err", err)
		s.oauthPage(w, status, "Link not valid", err.Error())
		return
	}
	authURL, err := s.cfg.Connect.Start(ctx, s.redirectURL(r), link.Server, link.Principal)
	if err != nil {
		s.log.Warn("console: connection not started", "server", link.Server, "principal", link.Principal, "err", err)
		s.oauthPage(w, http.StatusBadGateway, "Could not connect", err.Error())
		return
	}
	s.log.Info("console: connection started from a signed link", "server", link.Server, "principal", link.Principal)
	http.Redirect(w, r, authURL, http.StatusSeeOther)
}

// oauthCallback takes the authorization server's redirect.
func (s *Service) oauthCallback(w http.ResponseWriter, r *http.Request) {
	ctx, cancel, ok := s.flowContext(w, r)
	if !ok {
		return
	}
	defer cancel()
	server, principal, err := s.cfg.Connect.Finish(ctx, r.URL.Query())
	if err != nil {
		s.log.Warn("console: connection failed", "server", server, "principal", principal, "err", err)
		s.oauthPage(w, http.StatusBadRequest, "Connection failed", err.Error())
		return
	}
	s.log.Info("console: connected", "server", server, "principal", principal)
	who := "the team"
	if principal != tools.PrincipalTeam {
		who = "you"
	}
	s.oauthPage(w, http.StatusOK, "Connected", fmt.Sprintf("%s is connected for %s. You can close this window.", server, who))
}

// oauthStart is an operator's Connect of a team-wide server.
func (s *Service) oauthStart(w http.ResponseWriter, r *http.Request, sess *session) {
	ctx, cancel, ok := s.flowContext(w, r)
	if !ok {
		return
	}
	defer cancel()
	server := r.PostFormValue("server")
	authURL, err := s.cfg.Connect.Start(ctx, s.redirectURL(r), server, tools.PrincipalTeam)
	if err != nil {
		s.log.Warn("console action failed", "path", r.URL.Path, "operator", sess.who(), "err", err)
		http.Redirect(w, r, "/tools?notice="+url.QueryEscape("Failed: "+err.Error()), http.StatusSeeOther)
		return
	}
	s.log.Info("console: connection started", "server", server, "operator", sess.who())
	http.Redirect(w, r, authURL, http.StatusSeeOther)
}

// oauthDisconnect removes the team's grant of a server, or a person's
// (form field "user").
func (s *Service) oauthDisconnect(ctx context.Context, r *http.Request, _ *session) (string, error) {
	if s.cfg.Connect == nil {
		return "", errors.New("this console does not connect MCP servers")
	}
	server, user := r.PostFormValue("server"), strings.TrimSpace(r.PostFormValue("user"))
	revoked, err := s.cfg.Connect.Disconnect(ctx, server, user)
	if err != nil {
		return "", err
	}
	who := "the team's connection"
	if user != "" {
		who = user + "'s connection"
	}
	how := "deleted"
	if revoked {
		how = "revoked and deleted"
	}
	return fmt.Sprintf("Disconnected %s: %s %s.", server, who, how), nil
}

// connInfo is what the tools page shows of a server's OAuth connection.
type connInfo struct {
	OAuth, PerUser, Connected bool
	Command                   string
	// People are the Slack users connected to a per-user server.
	People []string
}

// connections describes each server's connection for the tools page.
func (s *Service) connections(ctx context.Context, st *tools.StatusResponse) map[string]*connInfo {
	if s.cfg.Connect == nil || st == nil {
		return nil
	}
	out := map[string]*connInfo{}
	for _, sv := range st.Servers {
		e, ok := s.cfg.Connect.Server(sv.Name)
		if !ok || !mcpconfig.Remote(e.Type) || (e.OAuth == nil && sv.State != tools.StateNeedsLogin) {
			continue
		}
		if e.OAuth != nil && e.OAuth.Grant == mcpconfig.GrantClientCredentials {
			continue
		}
		ci := connInfo{OAuth: true, PerUser: tools.PerUser(e), Command: tools.ConnectCommand(sv.Name)}
		if ci.PerUser {
			ci.People = s.cfg.Connect.People(ctx, sv.Name)
		} else {
			ci.Connected = s.cfg.Connect.Connected(ctx, sv.Name, tools.PrincipalTeam)
		}
		out[sv.Name] = &ci
	}
	return out
}
