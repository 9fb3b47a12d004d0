package console

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/relaystation/relay/secret"
)

// CookieName is the console's session cookie.
const CookieName = "relay_console"

// LocalOperator is the operator name of sessions on a loopback console
// without a token.
const LocalOperator = "local"

// session is one signed-in browser.
type session struct {
	Operator string
	// SelfDeclared marks a name typed at sign-in with the shared token,
	// which nothing vouches for.
	SelfDeclared bool
	CSRF         string
	Expires      time.Time
	live         int // open live streams, under Service.liveMu
}

// MaxSessions is how many sessions the console keeps; beyond it the
// oldest is signed out.
const MaxSessions = 1000

// sessions keeps the console's sessions in memory (a restart signs
// everybody out), at most MaxSessions, oldest first out. Safe for
// concurrent use.
type sessions struct {
	mu    sync.Mutex
	byID  map[string]*session
	order []string // ids by creation; all share one ttl, so also by expiry
	local struct { // the one session of a console without a token
		id string
		s  *session
	}
	token     secret.Value
	operators []Operator
	ttl       time.Duration
	now       func() time.Time
}

func newSessions(token secret.Value, operators []Operator, ttl time.Duration, now func() time.Time) *sessions {
	return &sessions{byID: map[string]*session{}, token: token, operators: operators, ttl: ttl, now: now}
}

// loginRequired reports whether a token must be given to sign in.
func (ss *sessions) loginRequired() bool { return ss.token.IsSet() || len(ss.operators) > 0 }

// sharedToken reports whether the shared token (a typed name) signs in.
func (ss *sessions) sharedToken() bool { return ss.token.IsSet() }

// checkToken compares a presented token with the configured ones in
// constant time (over their hashes, so the length does not leak either),
// every one of them whatever matches. It returns the operator a named
// token belongs to, or shared for the shared token.
func (ss *sessions) checkToken(presented string) (operator string, shared bool) {
	got := sha256.Sum256([]byte(presented))
	for _, o := range ss.operators {
		want := sha256.Sum256([]byte(o.Token.Reveal()))
		if subtle.ConstantTimeCompare(want[:], got[:]) == 1 && operator == "" {
			operator = o.Name
		}
	}
	want := sha256.Sum256([]byte(ss.token.Reveal()))
	shared = ss.token.IsSet() && subtle.ConstantTimeCompare(want[:], got[:]) == 1
	return operator, shared
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// create starts a session for operator and returns its id.
func (ss *sessions) create(operator string, selfDeclared bool) (string, *session) {
	id := randomHex(32)
	s := &session{Operator: operator, SelfDeclared: selfDeclared, CSRF: randomHex(32), Expires: ss.now().Add(ss.ttl)}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	now := ss.now()
	// Drop from the oldest end: expired ones, then beyond the cap. Ids
	// already dropped (signed out) are skipped as they come.
	for len(ss.order) > 0 {
		old := ss.byID[ss.order[0]]
		if old != nil && !now.After(old.Expires) && len(ss.byID) < MaxSessions {
			break
		}
		delete(ss.byID, ss.order[0])
		ss.order = ss.order[1:]
	}
	ss.byID[id] = s
	ss.order = append(ss.order, id)
	if len(ss.order) > 2*MaxSessions { // many signed out behind a live one
		kept := ss.order[:0]
		for _, k := range ss.order {
			if ss.byID[k] != nil {
				kept = append(kept, k)
			}
		}
		ss.order = kept
	}
	return id, s
}

// localSession is the one session of a console without a token, shared
// by every browser on loopback (they are all the same local operator):
// requests without its cookie reuse it rather than make new ones.
func (ss *sessions) localSession() (string, *session) {
	ss.mu.Lock()
	if s := ss.local.s; s != nil && !ss.now().After(s.Expires) && ss.byID[ss.local.id] == s {
		defer ss.mu.Unlock()
		return ss.local.id, s
	}
	ss.mu.Unlock()
	id, s := ss.create(LocalOperator, false)
	ss.mu.Lock()
	defer ss.mu.Unlock()
	ss.local.id, ss.local.s = id, s
	return id, s
}

// get returns the live session of id, or nil.
func (ss *sessions) get(id string) *session {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	s := ss.byID[id]
	if s == nil || ss.now().After(s.Expires) {
		return nil
	}
	return s
}

func (ss *sessions) drop(id string) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	delete(ss.byID, id)
	if id == ss.local.id {
		ss.local.s = nil
	}
}

// count is how many sessions are kept.
func (ss *sessions) count() int {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return len(ss.byID)
}

func (ss *sessions) setCookie(w http.ResponseWriter, id string) {
	http.SetCookie(w, &http.Cookie{Name: CookieName, Value: id, Path: "/", HttpOnly: true,
		SameSite: http.SameSiteStrictMode, MaxAge: int(ss.ttl.Seconds())})
}

// current returns the request's session. On a console without a token a
// session is created (and its cookie set) when there is none.
func (ss *sessions) current(w http.ResponseWriter, r *http.Request) *session {
	if c, err := r.Cookie(CookieName); err == nil {
		if s := ss.get(c.Value); s != nil {
			return s
		}
	}
	if ss.loginRequired() {
		return nil
	}
	id, s := ss.localSession()
	ss.setCookie(w, id)
	return s
}

// validCSRF reports whether the request carries the session's CSRF token.
func validCSRF(r *http.Request, s *session) bool {
	got := r.Header.Get("X-CSRF-Token")
	if got == "" {
		got = r.PostFormValue("csrf")
	}
	return got != "" && subtle.ConstantTimeCompare([]byte(got), []byte(s.CSRF)) == 1
}

// guard wraps the console's pages: no session sends a browser to /login
// (401 for the live streams); a POST without the session's CSRF token is
// refused with 403.
func (s *Service) guard(next func(http.ResponseWriter, *http.Request, *session)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		sess := s.sessions.current(w, r)
		if sess == nil {
			if r.Method == http.MethodGet && !strings.HasPrefix(r.URL.Path, "/live/") {
				http.Redirect(w, r, "/login?next="+urlQueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
				return
			}
			http.Error(w, "sign in first (/login)", http.StatusUnauthorized)
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead && !validCSRF(r, sess) {
			s.log.Warn("console: request without a valid CSRF token refused", "path", r.URL.Path, "operator", sess.Operator)
			http.Error(w, "missing or wrong CSRF token: reload the page and try again", http.StatusForbidden)
			return
		}
		next(w, r, sess)
	}
}

// loginPage shows the sign-in form (GET) and signs in (POST).
func (s *Service) loginPage(w http.ResponseWriter, r *http.Request) {
	next := consolePath(r.FormValue("next"))
	if !s.sessions.loginRequired() {
		http.Redirect(w, r, next, http.StatusSeeOther)
		return
	}
	data := map[string]any{"Next": next, "Shared": s.sessions.sharedToken(), "Named": len(s.cfg.Operators) > 0}
	if r.Method == http.MethodPost {
		client := clientAddr(r)
		if wait := s.throttle.wait(client); wait > 0 {
			s.log.Warn("console: sign-in throttled", "remote", client, "retry_after", wait.Round(time.Second).String())
			w.Header().Set("Retry-After", strconv.Itoa(int(wait.Seconds()+0.999)))
			http.Error(w, "too many wrong sign-ins from this address: try again later", http.StatusTooManyRequests)
			return
		}
		name := strings.TrimSpace(r.PostFormValue("operator"))
		named, shared := s.sessions.checkToken(r.PostFormValue("token"))
		selfDeclared := named == ""
		if named != "" {
			name = named // the token names the operator; a typed name is ignored
		}
		if named != "" || shared && validOperator(name) {
			s.throttle.succeeded(client)
			id, sess := s.sessions.create(name, selfDeclared)
			s.sessions.setCookie(w, id)
			s.log.Info("console: operator signed in", "operator", sess.who(), "remote", r.RemoteAddr)
			http.Redirect(w, r, next, http.StatusSeeOther)
			return
		}
		delay := s.throttle.failed(client)
		s.log.Warn("console: sign-in refused", "remote", client, "next_try_in", delay.String())
		w.WriteHeader(http.StatusUnauthorized)
		data["Error"] = "Wrong token, or no name (letters, digits, . _ - @, up to 64)."
	}
	s.render(w, r, "login", nil, data)
}

// logout ends the session.
func (s *Service) logout(w http.ResponseWriter, r *http.Request, _ *session) {
	if c, err := r.Cookie(CookieName); err == nil {
		s.sessions.drop(c.Value)
	}
	http.SetCookie(w, &http.Cookie{Name: CookieName, Value: "", Path: "/", MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteStrictMode})
	http.Redirect(w, r, "/login", http.StatusSeeOther)
}

// SelfDeclared is the mark after a name typed at sign-in with the shared
// token, wherever the console records or passes it on.
const SelfDeclared = " (self-declared)"

// who is the session's operator as the console records it: the name,
// marked when it is self-declared.
func (s *session) who() string {
	if s.SelfDeclared {
		return s.Operator + SelfDeclared
	}
	return s.Operator
}

func validOperator(name string) bool {
	if name == "" || len(name) > 64 {
		return false
	}
	for _, c := range name {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("._-@", c)
		if !ok {
			return false
		}
	}
	return true
}

// clientAddr is the request's client IP address (without port).
func clientAddr(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// Sign-in throttling: after a wrong sign-in an address waits
// throttleBase, doubling with every further one up to throttleMax.
const (
	throttleBase    = time.Second
	throttleMax     = 5 * time.Minute
	throttleClients = 10_000
)

// throttle counts wrong sign-ins per client address. Safe for concurrent use.
type throttle struct {
	mu    sync.Mutex
	now   func() time.Time
	fails map[string]*failures
}

type failures struct {
	n     int
	until time.Time
}

func newThrottle(now func() time.Time) *throttle {
	return &throttle{now: now, fails: map[string]*failures{}}
}

// wait is how long client must still wait before its next try.
func (t *throttle) wait(client string) time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	f := t.fails[client]
	if f == nil {
		return 0
	}
	return max(0, f.until.Sub(t.now()))
}

// failed records a wrong sign-in and returns the delay before the next.
func (t *throttle) failed(client string) time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	f := t.fails[client]
	if f == nil {
		if len(t.fails) >= throttleClients { // forget the ones done waiting
			now := t.now()
			for k, v := range t.fails {
				if now.Sub(v.until) > throttleMax {
					delete(t.fails, k)
				}
			}
		}
		f = &failures{}
		t.fails[client] = f
	}
	f.n++
	d := throttleMax
	if f.n < 20 {
		d = min(throttleMax, throttleBase<<(f.n-1))
	}
	f.until = t.now().Add(d)
	return d
}

// succeeded forgets client's wrong sign-ins.
func (t *throttle) succeeded(client string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.fails, client)
}
