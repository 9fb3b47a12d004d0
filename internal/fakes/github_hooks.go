package fakes

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
)

// Hook is a webhook the fake GitHub holds, of a repository ("owner/repo")
// or an organisation ("org").
type Hook struct {
	ID          int64
	Of          string
	URL         string
	ContentType string
	Secret      string
	InsecureSSL string
	Events      []string
	Active      bool
}

var hooksPath = regexp.MustCompile(`^(?:/api/v3)?/(?:repos/([^/]+/[^/]+)|orgs/([^/]+))/hooks(?:/(\d+))?$`)

// AddHook stores a webhook as if made by hand; it returns its id.
func (g *GitHub) AddHook(h Hook) int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.nextHook++
	h.ID = 100 + g.nextHook
	g.hooks = append(g.hooks, h)
	return h.ID
}

// Hooks returns the webhooks held, in the order created.
func (g *GitHub) Hooks() []Hook {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make([]Hook, len(g.hooks))
	for i, h := range g.hooks {
		h.Events = append([]string(nil), h.Events...)
		out[i] = h
	}
	return out
}

// HookWrites counts the create and edit requests for webhooks.
func (g *GitHub) HookWrites() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.hookWrites
}

// serveHooks answers the repository and organisation webhook API (list,
// create, edit) as GitHub does: the secret is never shown, only "********";
// a token of AdminTokens is required (401 without a token, 404 otherwise).
func (g *GitHub) serveHooks(w http.ResponseWriter, r *http.Request, m []string) {
	of := m[1] + m[2]
	tok := strings.TrimPrefix(strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer "), "token ")
	if tok == "" {
		w.WriteHeader(http.StatusUnauthorized)
		fmt.Fprint(w, `{"message":"Requires authentication"}`)
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.AdminTokens != nil && !g.AdminTokens[tok] {
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprint(w, `{"message":"Not Found"}`)
		return
	}
	type config struct {
		URL         *string `json:"url"`
		ContentType *string `json:"content_type"`
		Secret      *string `json:"secret"`
		InsecureSSL *string `json:"insecure_ssl"`
	}
	var body struct {
		Name   string   `json:"name"`
		Config *config  `json:"config"`
		Events []string `json:"events"`
		Active *bool    `json:"active"`
	}
	render := func(h Hook) map[string]any {
		cfg := map[string]any{"url": h.URL, "content_type": h.ContentType, "insecure_ssl": h.InsecureSSL}
		if h.Secret != "" {
			cfg["secret"] = "********"
		}
		return map[string]any{"id": h.ID, "type": "Repository", "name": "web", "active": h.Active,
			"events": h.Events, "config": cfg}
	}
	switch {
	case r.Method == http.MethodGet && m[3] == "":
		list := []map[string]any{}
		for _, h := range g.hooks {
			if h.Of == of {
				list = append(list, render(h))
			}
		}
		_ = json.NewEncoder(w).Encode(list)
	case r.Method == http.MethodPost && m[3] == "":
		raw, _ := io.ReadAll(r.Body)
		if err := json.Unmarshal(raw, &body); err != nil || body.Config == nil || body.Config.URL == nil {
			w.WriteHeader(http.StatusUnprocessableEntity)
			fmt.Fprint(w, `{"message":"Validation Failed"}`)
			return
		}
		g.hookWrites++
		g.nextHook++
		h := Hook{ID: 100 + g.nextHook, Of: of, URL: *body.Config.URL, ContentType: "form", Events: []string{"push"}, Active: true}
		apply(&h, body.Config.ContentType, body.Config.Secret, body.Config.InsecureSSL, body.Events, body.Active)
		g.hooks = append(g.hooks, h)
		w.WriteHeader(http.StatusCreated)
		_ = json.NewEncoder(w).Encode(render(h))
	case r.Method == http.MethodPatch && m[3] != "":
		id, _ := strconv.ParseInt(m[3], 10, 64)
		raw, _ := io.ReadAll(r.Body)
		if err := json.Unmarshal(raw, &body); err != nil {
			w.WriteHeader(http.StatusUnprocessableEntity)
			return
		}
		for i := range g.hooks {
			if h := &g.hooks[i]; h.ID == id && h.Of == of {
				g.hookWrites++
				if body.Config != nil {
					if body.Config.URL != nil {
						h.URL = *body.Config.URL
					}
					apply(h, body.Config.ContentType, body.Config.Secret, body.Config.InsecureSSL, body.Events, body.Active)
				} else {
					apply(h, nil, nil, nil, body.Events, body.Active)
				}
				_ = json.NewEncoder(w).Encode(render(*h))
				return
			}
		}
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprint(w, `{"message":"Not Found"}`)
	default:
		w.WriteHeader(http.StatusMethodNotAllowed)
	}
}

func apply(h *Hook, contentType, secret, insecure *string, events []string, active *bool) {
	if contentType != nil {
		h.ContentType = *contentType
	}
	if secret != nil {
		h.Secret = *secret
	}
	if insecure != nil {
		h.InsecureSSL = *insecure
	}
	if events != nil {
		h.Events = append([]string(nil), events...)
	}
	if active != nil {
		h.Active = *active
	}
}
