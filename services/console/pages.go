package console

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/relaystation/relay/envelope"
)

// page is one of the console's pages: its title, nav entry and the data of
// its live part, rendered by the template "{name}-live". A page whose data
// reads the hub's envelopes (hub) wakes the hub when it is asked for, and
// its live connection keeps the hub awake.
type page struct {
	Name  string
	Title string
	data  func(ctx context.Context, q url.Values) (map[string]any, error)
	hub   bool
}

func (s *Service) pages() []page {
	_, ownStory := s.story.(hubStory)
	return []page{
		{"overview", "Overview", s.overviewData, true},
		{"events", "Events", s.eventsData, true},
		{"story", "Story", s.storyData, ownStory},
		{"approvals", "Approvals", s.approvalsData, false},
		{"dlq", "Dead letters", s.dlqData, false},
		{"tools", "Tools, hooks and audit", s.toolsData, true},
	}
}

func (s *Service) routes() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /static/", staticFiles())
	mux.HandleFunc("GET /login", s.loginPage)
	mux.HandleFunc("POST /login", s.loginPage)
	mux.HandleFunc("POST /logout", s.guard(s.logout))
	for _, p := range s.pages() {
		path := "/" + p.Name
		if p.Name == "overview" {
			mux.HandleFunc("GET /{$}", s.guard(s.showPage(p)))
		}
		mux.HandleFunc("GET "+path, s.guard(s.showPage(p)))
		mux.HandleFunc("GET /live/"+p.Name, s.guard(s.live(p)))
	}
	mux.HandleFunc("GET /events/{id}", s.guard(s.eventJSON))
	mux.HandleFunc("GET /dlq/{seq}", s.guard(s.dlqShow))
	s.actionRoutes(mux)
	s.oauthRoutes(mux)
	return securityHeaders(s.trusted(mux))
}

// securityHeaders keeps the console out of frames and its pages uncached.
func securityHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("X-Frame-Options", "DENY")
		h.Set("Content-Security-Policy", "default-src 'self'; frame-ancestors 'none'; form-action 'self'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "same-origin")
		if !strings.HasPrefix(r.URL.Path, "/static/") {
			h.Set("Cache-Control", "no-store")
		}
		next.ServeHTTP(w, r)
	})
}

// showPage renders a whole page: the layout around the live part.
func (s *Service) showPage(p page) func(http.ResponseWriter, *http.Request, *session) {
	return func(w http.ResponseWriter, r *http.Request, sess *session) {
		frag, err := s.fragment(r.Context(), p, r.URL.Query(), sess)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		// The stream skips a first fragment equal to the one rendered here.
		lq := r.URL.Query()
		lq.Del("notice")
		lq.Set("v", digest(string(frag)))
		live := "/live/" + p.Name + "?" + lq.Encode()
		s.render(w, r, "layout", sess, map[string]any{
			"Page": p.Name, "Title": p.Title, "Live": live, "Fragment": frag, "Query": r.URL.Query(),
			"Notice": r.URL.Query().Get("notice"),
		})
	}
}

// fragment renders a page's live part.
func (s *Service) fragment(ctx context.Context, p page, q url.Values, sess *session) (template.HTML, error) {
	if p.hub {
		if err := s.hub.follow(ctx); err != nil {
			return "", err
		}
	}
	data, err := p.data(ctx, q)
	if err != nil {
		return "", err
	}
	data["CSRF"] = sess.CSRF
	var buf bytes.Buffer
	if err := s.tmpl.ExecuteTemplate(&buf, p.Name+"-live", data); err != nil {
		return "", fmt.Errorf("render %s: %w", p.Name, err)
	}
	return template.HTML(buf.String()), nil //nolint:gosec // rendered by html/template
}

// render executes a whole-page template with the navigation and session.
func (s *Service) render(w http.ResponseWriter, _ *http.Request, name string, sess *session, data map[string]any) {
	data["Nav"] = s.pages()
	data["Session"] = sess
	data["LoginRequired"] = s.sessions.loginRequired()
	var buf bytes.Buffer
	if err := s.tmpl.ExecuteTemplate(&buf, name, data); err != nil {
		http.Error(w, "render: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_, _ = w.Write(buf.Bytes())
}

// live streams a page's live part as server-sent events: a "fragment"
// event with the HTML whenever it changed, checked at every bus event and
// every second. A page of the hub's envelopes keeps the hub following the
// bus while it is connected.
func (s *Service) live(p page) func(http.ResponseWriter, *http.Request, *session) {
	return func(w http.ResponseWriter, r *http.Request, sess *session) {
		if !s.liveStart(sess) {
			s.log.Warn("console: live stream refused: too many open", "operator", sess.who(), "remote", r.RemoteAddr)
			w.Header().Set("Retry-After", "5")
			http.Error(w, fmt.Sprintf("too many live pages open (at most %d per session, %d in all): close some", MaxLiveStreamsPerSession, MaxLiveStreams), http.StatusTooManyRequests)
			return
		}
		defer s.liveEnd(sess)
		fl, ok := w.(http.Flusher)
		if !ok {
			http.Error(w, "streaming unsupported", http.StatusInternalServerError)
			return
		}
		if p.hub {
			release, err := s.hub.hold(r.Context())
			if err != nil {
				http.Error(w, err.Error(), http.StatusServiceUnavailable)
				return
			}
			defer release()
		}
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("X-Accel-Buffering", "no")
		q := r.URL.Query()
		last := q.Get("v") // the digest of the fragment the page shows
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		fmt.Fprint(w, ": live\n\n")
		fl.Flush()
		for {
			changed := s.hub.wait()
			rendered := time.Now()
			if frag, err := s.fragment(r.Context(), p, q, sess); err == nil && digest(string(frag)) != last {
				last = digest(string(frag))
				writeEvent(w, "fragment", string(frag))
				fl.Flush()
			}
			select {
			case <-r.Context().Done():
				return
			case <-changed:
			case <-tick.C:
			}
			// A busy bus re-renders a page at most every liveInterval.
			select {
			case <-r.Context().Done():
				return
			case <-time.After(time.Until(rendered.Add(liveInterval))):
			}
		}
	}
}

// Caps of the live streams (/live/*): each holds a connection and renders
// its page every second.
const (
	MaxLiveStreamsPerSession = 16
	MaxLiveStreams           = 64
)

// liveStart counts a new live stream of sess, or reports false when a cap
// is reached.
func (s *Service) liveStart(sess *session) bool {
	s.liveMu.Lock()
	defer s.liveMu.Unlock()
	if s.liveTotal >= MaxLiveStreams || sess.live >= MaxLiveStreamsPerSession {
		return false
	}
	s.liveTotal++
	sess.live++
	return true
}

func (s *Service) liveEnd(sess *session) {
	s.liveMu.Lock()
	defer s.liveMu.Unlock()
	s.liveTotal--
	sess.live--
}

// digest identifies a fragment's content.
func digest(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:8])
}

// liveInterval is the shortest time between two renders of a live page.
const liveInterval = 300 * time.Millisecond

// writeEvent writes one server-sent event, a data line per line of data.
func writeEvent(w http.ResponseWriter, name, data string) {
	fmt.Fprintf(w, "event: %s\n", name)
	for _, line := range strings.Split(data, "\n") {
		fmt.Fprintf(w, "data: %s\n", line)
	}
	fmt.Fprint(w, "\n")
}

// funcs are the templates' helpers.
var funcs = template.FuncMap{
	"since": func(t time.Time) string {
		if t.IsZero() {
			return ""
		}
		return time.Since(t).Round(time.Second).String() + " ago"
	},
	"clock": func(t time.Time) string {
		if t.IsZero() {
			return ""
		}
		return t.UTC().Format("15:04:05.000")
	},
	"dur": func(d time.Duration) string {
		if d <= 0 {
			return ""
		}
		return "+" + humanDuration(d)
	},
	"took": humanDuration,
	"short": func(s string) string {
		if len(s) > 8 {
			return s[:8]
		}
		return s
	},
	"content": func(e *envelope.Envelope) string {
		c := strings.TrimSpace(e.Content)
		if len([]rune(c)) > 140 {
			c = string([]rune(c)[:140]) + "…"
		}
		return c
	},
	"prettyJSON": prettyJSON,
	"list":       func(v ...string) []string { return v },
	"dict": func(kv ...any) map[string]any {
		m := map[string]any{}
		for i := 0; i+1 < len(kv); i += 2 {
			m[fmt.Sprint(kv[i])] = kv[i+1]
		}
		return m
	},
}
